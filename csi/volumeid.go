package csi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Volume and snapshot ids, as ceph-csi builds them: a version, then the
// length-prefixed cache pool and RBD pool, then the object uuids. They are
// decoded strictly (a foreign or mangled id is NotFound or InvalidArgument,
// never a guess), stay under the 128 bytes the CSI spec allows, and carry
// everything needed to find the objects without a lookup table:
//
//	0001-<len 4 hex>-<cachePool>-<len 4 hex>-<rbdPool>-<volume uuid>
//	0001-<len 4 hex>-<cachePool>-<len 4 hex>-<rbdPool>-<volume uuid>-<snapshot uuid>
const (
	idVersion = "0001"
	// maxIDLength is the CSI spec's limit on ids the driver returns.
	maxIDLength = 128
	// imagePrefix names the RBD image and the CachedVolume of a volume.
	imagePrefix = "csi-vol-"
	// snapshotPrefix names the RBD snapshot of a CSI snapshot.
	snapshotPrefix = "csi-snap-"
)

// nameSpace is the UUID v5 name space that turns CSI request names into
// object uuids: a retried CreateVolume with the same name finds the same
// objects.
var nameSpace = uuid.MustParse("0c3b6d52-64f7-4c1e-9a5e-5d2b7a8f1e43")

// volumeID identifies a volume: its CachePool, the RBD pool of its image
// and the uuid its image and CachedVolume are named after.
type volumeID struct {
	CachePool string
	RBDPool   string
	UUID      string
}

// snapshotID identifies a snapshot: its volume and its own uuid.
type snapshotID struct {
	volumeID
	SnapUUID string
}

// newVolumeID derives a volume's id from its request name.
func newVolumeID(cachePool, rbdPool, name string) volumeID {
	return volumeID{CachePool: cachePool, RBDPool: rbdPool, UUID: uuid.NewSHA1(nameSpace, []byte(name)).String()}
}

// newSnapshotID derives a snapshot's id from its source and request name.
func newSnapshotID(source volumeID, name string) snapshotID {
	return snapshotID{volumeID: source, SnapUUID: uuid.NewSHA1(nameSpace, []byte("snapshot/"+name)).String()}
}

// Image is the name of the volume's RBD image and of its CachedVolume.
func (v volumeID) Image() string { return imagePrefix + v.UUID }

func (v volumeID) String() string {
	return fmt.Sprintf("%s-%04x-%s-%04x-%s-%s", idVersion, len(v.CachePool), v.CachePool, len(v.RBDPool), v.RBDPool, v.UUID)
}

// Snapshot is the name of the RBD snapshot.
func (s snapshotID) Snapshot() string { return snapshotPrefix + s.SnapUUID }

func (s snapshotID) String() string { return s.volumeID.String() + "-" + s.SnapUUID }

// checkLength fails when an id would exceed the spec's limit (long pool
// names).
func checkIDLength(id string) error {
	if len(id) > maxIDLength {
		return errorf(ErrInvalidArgument, "the id %q would be %d bytes, more than the %d CSI allows: use shorter CachePool and RBD pool names", id, len(id), maxIDLength)
	}
	return nil
}

// parseVolumeID decodes a volume id; a malformed id is ErrNotFound, as
// the spec wants for ids this driver never returned.
func parseVolumeID(id string) (volumeID, error) {
	v, rest, err := parsePools(id)
	if err != nil {
		return volumeID{}, err
	}
	if _, err := uuid.Parse(rest); err != nil || len(rest) != 36 {
		return volumeID{}, errorf(ErrNotFound, "volume id %q: no volume uuid at its end", id)
	}
	v.UUID = rest
	return v, nil
}

// parseSnapshotID decodes a snapshot id.
func parseSnapshotID(id string) (snapshotID, error) {
	v, rest, err := parsePools(id)
	if err != nil {
		return snapshotID{}, err
	}
	if len(rest) != 36+1+36 || rest[36] != '-' {
		return snapshotID{}, errorf(ErrNotFound, "snapshot id %q: no volume and snapshot uuids at its end", id)
	}
	vol, snap := rest[:36], rest[37:]
	if _, err := uuid.Parse(vol); err != nil {
		return snapshotID{}, errorf(ErrNotFound, "snapshot id %q: bad volume uuid", id)
	}
	if _, err := uuid.Parse(snap); err != nil {
		return snapshotID{}, errorf(ErrNotFound, "snapshot id %q: bad snapshot uuid", id)
	}
	v.UUID = vol
	return snapshotID{volumeID: v, SnapUUID: snap}, nil
}

// parsePools reads "0001-<len>-<cachePool>-<len>-<rbdPool>-" and returns
// what follows.
func parsePools(id string) (volumeID, string, error) {
	bad := func(why string) (volumeID, string, error) {
		return volumeID{}, "", errorf(ErrNotFound, "id %q is not one of %s: %s", id, DriverName, why)
	}
	rest, ok := strings.CutPrefix(id, idVersion+"-")
	if !ok {
		return bad("unknown version")
	}
	cachePool, rest, err := lengthPrefixed(rest)
	if err != nil {
		return bad("cache pool: " + err.Error())
	}
	rbdPool, rest, err := lengthPrefixed(rest)
	if err != nil {
		return bad("RBD pool: " + err.Error())
	}
	return volumeID{CachePool: cachePool, RBDPool: rbdPool}, rest, nil
}

// lengthPrefixed reads "<4 hex len>-<field>-" off s.
func lengthPrefixed(s string) (field, rest string, err error) {
	if len(s) < 5 || s[4] != '-' {
		return "", "", fmt.Errorf("no length")
	}
	n, err := strconv.ParseUint(s[:4], 16, 16)
	if err != nil {
		return "", "", fmt.Errorf("length %q is not hex", s[:4])
	}
	s = s[5:]
	if n == 0 || int(n)+1 > len(s) || s[n] != '-' {
		return "", "", fmt.Errorf("length %d does not fit", n)
	}
	return s[:n], s[n+1:], nil
}
