package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultRackLabel is the Node label a cache server's rack is read from
// when a CachePool does not name one.
const DefaultRackLabel = "topology.rackcache.io/rack"

// CacheDevice is a block device (or file) on each cache server that holds
// cache data.
type CacheDevice struct {
	// Path is the device's absolute path on the node, e.g. /dev/nvme1n1 or
	// /dev/disk/by-id/nvme-....
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.contains('/../') && !self.endsWith('/..')",message="device path must be absolute (start with /) and must not contain .., e.g. /dev/nvme1n1"
	Path string `json:"path"`
	// Size is how much of the device the cache uses; the whole device when unset.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="device size must be a positive byte quantity such as 800Gi"
	Size *resource.Quantity `json:"size,omitempty"`
	// Wipe lets the first volume placed on the device format it although it
	// is not blank: a filesystem, partition table, LVM or BlueStore
	// signature, or a damaged rackcache format. That erases everything on
	// it, write-back data of volumes cached there included. Without it
	// such a device is refused and its volumes report what was found.
	// A device holding a loadable rackcache format is never wiped.
	// +optional
	Wipe bool `json:"wipe,omitempty"`
}

// RookBackend points at a Rook CephCluster: monitors come from its
// ConfigMap rook-ceph-mon-endpoints, credentials from the Secrets Rook
// creates for CSI (rook-csi-rbd-provisioner, rook-csi-rbd-node).
type RookBackend struct {
	// Namespace is the namespace of the Rook CephCluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
}

// SecretReference names a Secret holding the Ceph user (keys userID and userKey).
type SecretReference struct {
	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
}

// CephBackend says where the Ceph cluster is: a Rook CephCluster, or
// explicit monitors plus a Secret.
// +kubebuilder:validation:XValidation:rule="has(self.rook) != has(self.monitors)",message="set exactly one of ceph.rook (a Rook CephCluster namespace) or ceph.monitors (with ceph.secretRef)"
// +kubebuilder:validation:XValidation:rule="!has(self.monitors) || has(self.secretRef)",message="ceph.monitors needs ceph.secretRef naming a Secret with keys userID and userKey"
// +kubebuilder:validation:XValidation:rule="!has(self.rook) || !has(self.secretRef)",message="ceph.secretRef is not used with ceph.rook (Rook's CSI Secrets are read); remove it"
type CephBackend struct {
	// Rook points at a Rook CephCluster.
	// +optional
	Rook *RookBackend `json:"rook,omitempty"`
	// Monitors are the Ceph monitor addresses, host:port (e.g. 10.0.0.1:6789).
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=255
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[^:/ ]+:[0-9]{1,5}$') || self.matches('^\\\\[[0-9a-fA-F:.]+\\\\]:[0-9]{1,5}$')",message="each monitor must be host:port or [ipv6]:port, e.g. 10.0.0.1:6789"
	// +listType=atomic
	Monitors []string `json:"monitors,omitempty"`
	// SecretRef names the Secret with the Ceph user for explicit monitors.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
}

// Placement says how volumes are spread over the pool's servers.
type Placement struct {
	// RackLabel is the Node label holding a cache server's rack.
	// +optional
	// +kubebuilder:default="topology.rackcache.io/rack"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	RackLabel string `json:"rackLabel,omitempty"`
	// AllowCrossRack lets a volume wanted in a rack with no free capacity be
	// placed in another rack (its NVMe/TCP traffic then crosses racks).
	// +optional
	// +kubebuilder:default=true
	AllowCrossRack *bool `json:"allowCrossRack,omitempty"`
}

// CachePoolSpec is the desired state of a CachePool.
// +kubebuilder:validation:XValidation:rule="self.allocationMode != 'Fixed' || size(self.blockSizesKiB) == 1",message="allocationMode Fixed uses exactly one block size; list one entry in blockSizesKiB"
// +kubebuilder:validation:XValidation:rule="!has(self.fillSize) || self.fillSize != 'Locality' || self.allocationMode != 'Fixed'",message="fillSize Locality needs allocationMode Adaptive (a fixed pool has one block size)"
type CachePoolSpec struct {
	// NodeSelector picks the nodes that run a cache server.
	// +required
	// +kubebuilder:validation:MinProperties=1
	NodeSelector map[string]string `json:"nodeSelector"`
	// Tolerations of the cache server pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Devices hold the cache data on every server.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=path
	Devices []CacheDevice `json:"devices"`
	// BlockSizesKiB are the cache block sizes in KiB, ascending, each a power
	// of two from 4 to 1024.
	// +optional
	// +kubebuilder:default={32,64,128,256}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=9
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="blockSizesKiB must not repeat a size"
	// +kubebuilder:validation:XValidation:rule="[1, 2, 3, 4, 5, 6, 7, 8].all(i, i >= size(self) || self[i - 1] <= self[i])",message="blockSizesKiB must be in ascending order, e.g. [32, 64, 128, 256]"
	// +listType=atomic
	BlockSizesKiB []BlockSizeKiB `json:"blockSizesKiB,omitempty"`
	// AllocationMode says how cache blocks are sized.
	// +optional
	// +kubebuilder:default=Adaptive
	AllocationMode AllocationMode `json:"allocationMode,omitempty"`
	// FillSize says how a miss sizes the block it fills (Adaptive only):
	// Request (the dataplane's default when unset) or Locality, best with 4
	// among blockSizesKiB (docs/engine.md, "Fill sizing by locality").
	// +optional
	FillSize FillSize `json:"fillSize,omitempty"`
	// WriteMode is the write mode of volumes that do not set their own,
	// taken when the volume is created (changing it later does not change
	// existing volumes).
	// +optional
	// +kubebuilder:default=WriteThrough
	WriteMode WriteMode `json:"writeMode,omitempty"`
	// Policies are the default cache policies of the pool's volumes.
	// +optional
	Policies CachePolicy `json:"policies,omitempty"`
	// Port is the NVMe/TCP port the cache servers listen on.
	// +optional
	// +kubebuilder:default=4420
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// Ceph is the backing Ceph cluster.
	// +required
	Ceph CephBackend `json:"ceph"`
	// Placement says how volumes are spread over the servers.
	// +optional
	Placement Placement `json:"placement,omitempty"`
	// Replicas is how many cache servers serve each volume: 1, or 2 for an
	// owner and a mirror on different nodes, both exporting the volume's
	// subsystem as two paths of one namespace (ANA: the owner's optimized,
	// the mirror's inaccessible until it is promoted). Unset: 2 when the
	// pool has at least two servers, 1 otherwise.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2
	Replicas *int32 `json:"replicas,omitempty"`
	// FailoverGrace is how long a volume's owner may be lost (not listed,
	// not ready, or not answering) before its mirror is promoted. Without a
	// mirror the operator's --server-lost-grace applies.
	// +optional
	// +kubebuilder:default="5s"
	FailoverGrace *metav1.Duration `json:"failoverGrace,omitempty"`
	// Image is the dataplane container image.
	// +required
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// ImagePullPolicy of the dataplane container.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Resources of the dataplane container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// BusyPoll is how the dataplane's threads wait for I/O: "off" (the
	// default) sleeps when idle; "on" never sleeps, spending a core per
	// dataplane thread for the lowest latency (as SPDK's reactors); a
	// window such as "50us" or "2ms" spins that long after the last
	// NVMe/TCP activity, then sleeps. Give the container whole CPUs
	// (Guaranteed QoS with the static CPU manager) before turning it on.
	// +optional
	// +kubebuilder:validation:Pattern=`^(off|on|[1-9][0-9]{0,5}us|[1-9][0-9]{0,2}ms|1000ms)$`
	BusyPoll string `json:"busyPoll,omitempty"`
	// DataPath says how hosts prove who they are to the pool's servers.
	// +optional
	// +kubebuilder:default={}
	DataPath DataPath `json:"dataPath,omitempty"`
}

// HostAuthentication is how a host proves itself on the data path.
// +kubebuilder:validation:Enum=DHHMACCHAP;None
type HostAuthentication string

const (
	// HostAuthenticationDHHMACCHAP: every host allowed on a volume gets
	// its own DH-HMAC-CHAP key pair (NVMe in-band authentication, both
	// ways); a host that cannot prove its key gets no queue.
	HostAuthenticationDHHMACCHAP HostAuthentication = "DHHMACCHAP"
	// HostAuthenticationNone: the host NQN alone admits a host. Anyone who
	// reaches the servers' port and knows an allowed NQN (it is no secret)
	// reads and writes the volume.
	HostAuthenticationNone HostAuthentication = "None"
)

// DataPath is the pool's NVMe/TCP data path.
// +kubebuilder:validation:XValidation:rule="!has(self.network) || !has(self.interface)",message="set at most one of dataPath.network (a CIDR) and dataPath.interface (a node interface name)"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || !self.tls || !has(self.authentication) || self.authentication != 'None'",message="dataPath.tls needs authentication DHHMACCHAP: the TLS PSKs are delivered with the hosts' DH-HMAC-CHAP keys"
// +kubebuilder:validation:XValidation:rule="(has(self.tls) && self.tls) == (has(oldSelf.tls) && oldSelf.tls)",message="dataPath.tls cannot change on a live pool: every volume of a server shares its listener; make a new pool"
type DataPath struct {
	// Network is a CIDR (e.g. a storage network's 10.20.0.0/16): each
	// server serves NVMe/TCP on its address in it, and a server without
	// one is not ready. Unset (and no interface): the node's primary
	// address, which the operator also uses for JSON-RPC and metrics.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="dataPath.network must be a CIDR such as 10.20.0.0/16"
	Network string `json:"network,omitempty"`
	// Interface names the node interface whose address serves NVMe/TCP
	// (the same name on every server), e.g. a storage network's NIC.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,14}$`
	Interface string `json:"interface,omitempty"`
	// Authentication of hosts: DHHMACCHAP (the default) or None, which
	// must be chosen explicitly (docs/security.md says what it exposes).
	// +optional
	// +kubebuilder:default=DHHMACCHAP
	Authentication HostAuthentication `json:"authentication,omitempty"`
	// KeyRotationInterval is how long a host's key pair is used before the
	// operator replaces it, the volume staying mounted; "0s" turns the
	// schedule off (annotate a CachedVolume with
	// rackcache.io/rotate-host-keys to rotate on demand).
	// +optional
	// +kubebuilder:default="720h"
	KeyRotationInterval *metav1.Duration `json:"keyRotationInterval,omitempty"`
	// TLS: hosts reach the pool's volumes only through NVMe/TCP's secure
	// channel, TLS 1.3 with a pre-shared key per host and volume, made and
	// rotated with the DH-HMAC-CHAP keys. Every node needs tlshd
	// (ktls-utils) running with the .nvme keyring (docs/security.md).
	// Set when the pool is made; it cannot change.
	// +optional
	TLS bool `json:"tls,omitempty"`
}

// NamesDataPath tells whether the pool serves NVMe/TCP on an address of
// its own choosing rather than the node's primary one.
func (d DataPath) NamesDataPath() bool { return d.Network != "" || d.Interface != "" }

// ServingAddress is where hosts reach s's NVMe/TCP listeners.
func (s *ServerStatus) ServingAddress() string {
	if s.DataAddress != "" {
		return s.DataAddress
	}
	return s.Address
}

// AuthenticatesHosts tells whether the pool's hosts must authenticate
// (anything but an explicit None: an object that skipped the apiserver's
// defaulting is not left open).
func (d DataPath) AuthenticatesHosts() bool {
	return d.Authentication != HostAuthenticationNone
}

// ServerStatus is what the operator last read from one cache server.
type ServerStatus struct {
	// NodeName is the node the server runs on.
	// +required
	NodeName string `json:"nodeName"`
	// Rack is the node's rack label value, empty when unlabelled.
	// +optional
	Rack string `json:"rack,omitempty"`
	// Address is the node's address: the operator reaches the server's
	// JSON-RPC there, and hosts its NVMe/TCP listeners unless the pool
	// names a data path.
	// +optional
	Address string `json:"address,omitempty"`
	// DataAddress is where hosts reach the server's NVMe/TCP listeners
	// when the pool names a data path (dataPath.network or interface).
	// +optional
	DataAddress string `json:"dataAddress,omitempty"`
	// Ready is true when the server answers and its cache devices are healthy.
	// +optional
	Ready bool `json:"ready"`
	// Capacity is the cache capacity of the server.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`
	// Allocated is the cache capacity given to volumes.
	// +optional
	Allocated *resource.Quantity `json:"allocated,omitempty"`
	// Devices are the server's cache devices and their capacity: a
	// volume's cache lives on one device, so placement needs room on one.
	// +optional
	// +listType=map
	// +listMapKey=name
	Devices []DeviceStatus `json:"devices,omitempty"`
	// Volumes is the number of cached volumes on the server.
	// +optional
	Volumes int32 `json:"volumes"`
	// IOPS is the server's read and write operations per second between the
	// operator's last two reads of its I/O statistics; placement's power of
	// two choices compares it.
	// +optional
	IOPS int64 `json:"iops,omitempty"`
	// Version is the dataplane's version.
	// +optional
	Version string `json:"version,omitempty"`
	// Message says why the server is not ready.
	// +optional
	Message string `json:"message,omitempty"`
	// ConfigErrors are the start-up configuration calls that failed on the
	// server and that it keeps for a retry (rackcache_get_config_errors),
	// one line each: the server serves everything else. Calls of volumes
	// deleted meanwhile are dropped by the operator, not listed.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	ConfigErrors []string `json:"configErrors,omitempty"`
}

// DeviceStatus is one cache device of a server.
type DeviceStatus struct {
	// Name is the device's cache bdev on the dataplane (cache0 for the
	// pool's first device, and so on).
	// +required
	Name string `json:"name"`
	// Capacity is the device's cache capacity.
	// +required
	Capacity resource.Quantity `json:"capacity"`
}

// CachePoolStatus is the observed state of a CachePool.
type CachePoolStatus struct {
	// Conditions: Ready, Degraded, Progressing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the last successful pass acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Servers is per-server state.
	// +optional
	// +listType=map
	// +listMapKey=nodeName
	Servers []ServerStatus `json:"servers,omitempty"`
	// ReadyServers counts servers that are ready.
	// +optional
	ReadyServers int32 `json:"readyServers"`
	// TotalServers counts servers the pool should run.
	// +optional
	TotalServers int32 `json:"totalServers"`
	// Capacity is the pool's total cache capacity.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`
	// Allocated is the cache capacity given to volumes.
	// +optional
	Allocated *resource.Quantity `json:"allocated,omitempty"`
	// Volumes counts the pool's cached volumes.
	// +optional
	Volumes int32 `json:"volumes"`
}

// CachePool is a set of cache servers (the nodes its node selector picks),
// their cache devices and policies, and the Ceph cluster behind them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cpool,categories=rackcache
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyServers`,description="Ready cache servers"
// +kubebuilder:printcolumn:name="Servers",type=integer,JSONPath=`.status.totalServers`,description="Cache servers"
// +kubebuilder:printcolumn:name="Capacity",type=string,JSONPath=`.status.capacity`
// +kubebuilder:printcolumn:name="Allocated",type=string,JSONPath=`.status.allocated`
// +kubebuilder:printcolumn:name="Volumes",type=integer,JSONPath=`.status.volumes`
// +kubebuilder:printcolumn:name="Write Mode",type=string,JSONPath=`.spec.writeMode`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CachePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec CachePoolSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status CachePoolStatus `json:"status,omitempty"`
}

// CachePoolList is a list of CachePools.
//
// +kubebuilder:object:root=true
type CachePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CachePool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CachePool{}, &CachePoolList{})
}
