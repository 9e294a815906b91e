package cachedvolume

import (
	"net"
	"slices"
	"strconv"
	"strings"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/servers"
)

// rbdBlockSize is the block size the RBD image is opened with: the cached
// bdev exports the larger of it and the cache device's.
const rbdBlockSize = 4096

// Desired is what should exist on the volume's server's dataplane.
type Desired struct {
	// Volume is the CachedVolume's name.
	Volume  string
	Cluster dataplane.RbdCluster
	Rbd     dataplane.RbdBdev
	// SizeBytes is the volume's size: the RBD bdev is grown to it when
	// smaller (the image may already be, grown by the CSI controller).
	SizeBytes int64
	// Cached leaves CacheBdevName empty: apply finds the device holding the
	// volume's cache, or the one with most room, among CacheDevices.
	Cached       dataplane.CachedBdevParams
	CacheDevices []string
	// WipeDevices are the CacheDevices the pool allows to format although
	// they are not blank (CacheDevice.Wipe).
	WipeDevices []string
	Subsystem   dataplane.SubsystemParams
	Namespace   dataplane.Namespace
	Listener    dataplane.ListenAddress
	// Hosts are the allowed host NQNs, sorted.
	Hosts []string
	// HostKeys are each host's DH-HMAC-CHAP keys; nil when the pool does
	// not authenticate hosts (set by the caller from the Secret).
	HostKeys map[string]HostKeys
	// ANAState is the state the listener reports for the namespace's ANA
	// group: optimized on the owner, inaccessible on the mirror. A
	// subsystem created before ANA reporting keeps none (apply.go).
	ANAState dataplane.ANAState
	// FreshCache: a cache of the volume found on a device is stale (a
	// mirror's, on a server that served the volume before): it is
	// discarded and a new one made. Never with dirty data in it.
	FreshCache bool
	// ReplicaKeys are the replication channel's keys this server holds
	// (owner and mirror of a write-back volume; replication.go), nil
	// elsewhere.
	ReplicaKeys *HostKeys
	// ReplicaHost, on a write-back volume's mirror, is the owner's server
	// host NQN, the only host of the replication subsystem ("" elsewhere:
	// no replication subsystem).
	ReplicaHost string
	// MustLoad: the volume ran write-back on this server, so its cache may
	// hold dirty data: the cached bdev may only be re-attached (load), and
	// a cache found on no device is an error, never a fresh cache.
	MustLoad bool
}

// DesiredState builds the dataplane objects of vol on a server at address:
// the pool's Ceph registration, the RBD bdev, the cached bdev with the
// volume's effective policies, and its NVMe/TCP subsystem.
func DesiredState(vol *rcv1.CachedVolume, pool *rcv1.CachePool, backend *ceph.Backend, address string, cacheSizeBytes int64) Desired {
	cluster := ClusterName(pool.Name, backend.Fingerprint())
	nqn := SubsystemNQN(vol.Name)
	devices := make([]string, len(pool.Spec.Devices))
	var wipe []string
	for i, d := range pool.Spec.Devices {
		devices[i] = servers.CacheBdevName(i)
		if d.Wipe {
			wipe = append(wipe, devices[i])
		}
	}
	hosts := slices.Clone(vol.Spec.AllowedHosts)
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	port := pool.Spec.Port
	if port == 0 {
		port = 4420
	}
	return Desired{
		Volume: vol.Name,
		Cluster: dataplane.RbdCluster{
			Name:    cluster,
			UserID:  backend.UserID,
			MonHost: backend.MonHost(),
			// No key: the server reads it from the keyring the pool's
			// Secret mounts (--ceph-keyring), so its saved configuration
			// never holds it. The name's fingerprint still follows the key,
			// so a new key registers anew.
		},
		Rbd: dataplane.RbdBdev{
			Name:        RbdBdevName(vol.Name),
			ClusterName: cluster,
			PoolName:    vol.Spec.RBD.Pool,
			RbdName:     vol.Spec.RBD.Image,
			BlockSize:   rbdBlockSize,
		},
		SizeBytes:    vol.Spec.Size.Value(),
		Cached:       cachedParams(vol, pool, cacheSizeBytes),
		CacheDevices: devices,
		WipeDevices:  wipe,
		Subsystem: dataplane.SubsystemParams{
			NQN:           nqn,
			SerialNumber:  SerialNumber(string(vol.UID)),
			ModelNumber:   ModelNumber,
			MaxNamespaces: 1,
			// Every volume may get a second path (a mirror, a promotion).
			ANAReporting: true,
		},
		Namespace: dataplane.Namespace{
			NSID:     1,
			BdevName: CachedBdevName(vol.Name),
			UUID:     NamespaceUUID(string(vol.UID)),
			ANAGroup: anaGroup,
		},
		Listener: dataplane.ListenAddress{
			TrType:  "TCP",
			AdrFam:  addressFamily(address),
			TrAddr:  address,
			TrSvcID: strconv.Itoa(int(port)),
			// Every volume of the pool on this server shares the listener.
			SecureChannel: pool.Spec.DataPath.TLS,
		},
		Hosts: hosts,
	}
}

func addressFamily(address string) string {
	if ip := net.ParseIP(address); ip != nil && ip.To4() == nil {
		return "IPv6"
	}
	return "IPv4"
}

// EffectiveWriteMode is the volume's write mode: its own; else the mode it
// runs with (status.writeMode, the pool's mode when it was created: the
// pool's writeMode is taken at creation, so changing it later moves no
// existing volume, write-back ones least of all); else the pool's.
func EffectiveWriteMode(vol *rcv1.CachedVolume, pool *rcv1.CachePool) rcv1.WriteMode {
	switch {
	case vol.Spec.WriteMode != "":
		return vol.Spec.WriteMode
	case vol.Status.WriteMode != "":
		return vol.Status.WriteMode
	case pool.Spec.WriteMode != "":
		return pool.Spec.WriteMode
	default:
		return rcv1.WriteThrough
	}
}

func cachedParams(vol *rcv1.CachedVolume, pool *rcv1.CachePool, cacheSizeBytes int64) dataplane.CachedBdevParams {
	alloc := vol.Spec.AllocationMode
	if alloc == "" {
		alloc = pool.Spec.AllocationMode
	}
	p := EffectivePolicy(pool.Spec.Policies, vol.Spec.Policies)
	out := dataplane.CachedBdevParams{
		Name:          CachedBdevName(vol.Name),
		CoreBdevName:  RbdBdevName(vol.Name),
		CacheSizeMiB:  uint64(cacheSizeBytes / mib),
		WriteMode:     DataplaneWriteMode(EffectiveWriteMode(vol, pool)),
		Mode:          strings.ToLower(string(alloc)),
		WriteMissFill: writeMissFill(p.WriteMissFill),
		Admission:     p.Admission,
		Eviction:      p.Eviction,
		Cleaning:      cleaning(p.Cleaning),
		SeqCutoff:     seqCutoff(p.SeqCutoff),
	}
	// The pool's fill sizing is for adaptive volumes: a volume that
	// overrides the mode to Fixed has one block size to fill.
	if alloc != rcv1.Fixed {
		out.FillSize = strings.ToLower(string(pool.Spec.FillSize))
	}
	for _, kib := range pool.Spec.BlockSizesKiB {
		out.BlockSizesKiB = append(out.BlockSizesKiB, uint32(kib))
	}
	return out
}

// EffectivePolicy is the pool's policies with each field the volume sets
// overriding the pool's.
func EffectivePolicy(pool, vol rcv1.CachePolicy) rcv1.CachePolicy {
	out := pool
	if vol.WriteMissFill != "" {
		out.WriteMissFill = vol.WriteMissFill
	}
	if vol.Admission != "" {
		out.Admission = vol.Admission
	}
	if vol.Eviction != "" {
		out.Eviction = vol.Eviction
	}
	if vol.Cleaning != nil {
		out.Cleaning = vol.Cleaning
	}
	if vol.SeqCutoff != nil {
		out.SeqCutoff = vol.SeqCutoff
	}
	return out
}

// DataplaneWriteMode maps the API's write mode to the dataplane's.
func DataplaneWriteMode(m rcv1.WriteMode) string {
	switch m {
	case rcv1.WriteBack:
		return dataplane.WriteBack
	case rcv1.WriteAround:
		return dataplane.WriteAround
	case rcv1.PassThrough:
		return dataplane.PassThrough
	default:
		return dataplane.WriteThrough
	}
}

// APIWriteMode maps the dataplane's write mode back ("" when unknown).
func APIWriteMode(m string) rcv1.WriteMode {
	for _, w := range []rcv1.WriteMode{rcv1.WriteThrough, rcv1.WriteBack, rcv1.WriteAround, rcv1.PassThrough} {
		if DataplaneWriteMode(w) == m {
			return w
		}
	}
	return ""
}

func writeMissFill(f rcv1.WriteMissFill) string {
	switch f {
	case rcv1.WriteMissFillSparse:
		return "sparse"
	case rcv1.WriteMissFillHeadTail:
		return "head-tail"
	case rcv1.WriteMissFillWholeBlock:
		return "whole-block"
	default:
		return ""
	}
}

func cleaning(c *rcv1.Cleaning) *dataplane.Cleaning {
	if c == nil {
		return nil
	}
	out := &dataplane.Cleaning{Policy: strings.ToLower(string(c.Policy))}
	out.StalenessMs = uint64(deref(c.StalenessMs))
	out.WakeUpMs = uint64(deref(c.WakeUpMs))
	out.MaxBatch = uint32(deref(c.MaxBatch))
	out.ActivityThresholdMs = uint64(deref(c.ActivityThresholdMs))
	out.BatchBlocks = uint32(deref(c.BatchBlocks))
	if c.DirtyRatioPercent != nil {
		// The dataplane takes a fraction of the cache.
		out.DirtyRatio = float64(*c.DirtyRatioPercent) / 100
	}
	return out
}

func seqCutoff(s *rcv1.SeqCutoff) *dataplane.SeqCutoff {
	if s == nil {
		return nil
	}
	return &dataplane.SeqCutoff{Policy: strings.ToLower(string(s.Policy)), ThresholdKiB: uint64(deref(s.ThresholdKiB))}
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
