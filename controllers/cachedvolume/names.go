package cachedvolume

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// Names of a volume's objects on its dataplane. They derive from the
// CachedVolume alone, so any pass (and any operator replica) finds the
// objects an earlier one created, and a restarted dataplane gets the same
// names back.

// NQNPrefix starts every volume's subsystem NQN.
const NQNPrefix = "nqn.2025-01.io.rackcache:vol:"

// maxNQNLength is the NVMe limit on an NQN, in bytes.
const maxNQNLength = 223

// nqnHashLength is how many hex digits of the name's SHA-256 end a
// shortened NQN: enough that two long names sharing a prefix never clash.
const nqnHashLength = 32

// SubsystemNQN is the NVMe subsystem NQN of volume name. Names too long for
// the 223-byte limit keep a prefix and end with a hash of the whole name.
func SubsystemNQN(name string) string { return nqnFor(NQNPrefix, name) }

// ReplicaNQNPrefix starts every volume's replication subsystem NQN: the
// subsystem a write-back mirror exports its copy on, to its owner only.
const ReplicaNQNPrefix = "nqn.2025-01.io.rackcache:replica:"

// ReplicaNQN is the NQN of volume name's replication subsystem.
func ReplicaNQN(name string) string { return nqnFor(ReplicaNQNPrefix, name) }

// ServerHostNQN is the host NQN cache server node's dataplane connects to
// its mirrors with.
func ServerHostNQN(node string) string { return nqnFor("nqn.2025-01.io.rackcache:server:", node) }

// nqnFor is prefix + name, shortened to the NQN limit with a hash.
func nqnFor(prefix, name string) string {
	nqn := prefix + name
	if len(nqn) <= maxNQNLength {
		return nqn
	}
	sum := sha256.Sum256([]byte(name))
	keep := maxNQNLength - len(prefix) - nqnHashLength - 1
	return prefix + name[:keep] + "-" + hex.EncodeToString(sum[:])[:nqnHashLength]
}

// RbdBdevName is the dataplane bdev opening the volume's RBD image.
func RbdBdevName(name string) string { return "rbd-" + name }

// CachedBdevName is the volume's cached bdev (also its name on the cache
// device, which is how a restarted dataplane's cache is found again).
func CachedBdevName(name string) string { return "cv-" + name }

// ClusterName is the dataplane's registration of pool's Ceph cluster; the
// fingerprint changes with the monitors or credentials, so a change
// registers anew instead of reusing a stale connection.
func ClusterName(pool, fingerprint string) string { return "ceph-" + pool + "-" + fingerprint }

// namespaceUUIDSpace is the UUID v5 name space of namespace UUIDs (a
// random constant: it only has to be fixed forever).
var namespaceUUIDSpace = uuid.MustParse("5b0c7f64-3e2a-4d6b-9f61-0c2d8e4a7b15")

// NamespaceUUID is the stable UUID of the volume's namespace: a recreated
// namespace (another pass, a restarted dataplane) looks the same to hosts.
func NamespaceUUID(volumeUID string) string {
	return uuid.NewSHA1(namespaceUUIDSpace, []byte(volumeUID)).String()
}

// SerialNumber is the subsystem's serial: 20 ASCII characters (the NVMe
// field's size) derived from the volume's UID.
func SerialNumber(volumeUID string) string {
	sum := sha256.Sum256([]byte(volumeUID))
	return strings.ToUpper("RC" + hex.EncodeToString(sum[:])[:18])
}

// ModelNumber is the subsystem's model (at most 40 ASCII characters).
const ModelNumber = "rackcache cached volume"

// ObjectNames are the names of volume name's objects on a dataplane that a
// saved configuration call may make: its RBD bdev, cached bdev,
// subsystem and replication subsystem (whose NQNs also name their
// namespaces, hosts and listeners).
func ObjectNames(name string) []string {
	return []string{RbdBdevName(name), CachedBdevName(name), SubsystemNQN(name), ReplicaNQN(name)}
}

// IsVolumeObject reports whether object is named like one of a volume's
// objects (an RBD bdev, a cached bdev or a subsystem of a volume).
func IsVolumeObject(object string) bool {
	// The names with an empty volume name are the prefixes.
	return strings.HasPrefix(object, RbdBdevName("")) || strings.HasPrefix(object, CachedBdevName("")) ||
		strings.HasPrefix(object, NQNPrefix) || strings.HasPrefix(object, ReplicaNQNPrefix)
}
