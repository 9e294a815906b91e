// Package servers is what the CachePool and CachedVolume reconcilers share
// about a pool's cache servers: the names and labels of the objects the
// operator creates for a pool, which servers a pool has (its dataplane pods
// and their Nodes), and how to reach a server's JSON-RPC endpoint.
package servers

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Labels on every object the operator makes for a pool (DaemonSet, pods,
// Secrets, ConfigMap).
const (
	// LabelName is app.kubernetes.io/name; its value on dataplane pods is
	// AppName.
	LabelName = "app.kubernetes.io/name"
	// AppName names the dataplane component.
	AppName = "rackcache-dataplane"
	// LabelManagedBy is app.kubernetes.io/managed-by; its value is ManagerName.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagerName is the operator's name as a manager and SSA field owner.
	ManagerName = "rackcache-operator"
	// LabelPool carries the CachePool's name.
	LabelPool = "rackcache.io/pool"
)

// Ports a dataplane pod listens on, on its node's address (host network).
const (
	// RPCPort serves JSON-RPC over HTTPS to the operator, whose bearer
	// tokens the server has the API server review (--rpc-listen).
	RPCPort = 5260
	// MetricsPort serves Prometheus metrics and the probes (--metrics-listen).
	MetricsPort = 9560
)

// Keys of the Secrets the operator creates for a pool.
const (
	// TokenKey holds the bearer token in the metrics token Secret.
	TokenKey = "token"
	// CACertKey holds the CA certificate (PEM) in the CA and TLS Secrets.
	CACertKey = "ca.crt"
	// CAKeyKey holds the CA private key (PEM), in the CA Secret only.
	CAKeyKey = "ca.key"
	// TLSCertKey and TLSKeyKey hold the server certificate and key (PEM).
	TLSCertKey = "tls.crt"
	TLSKeyKey  = "tls.key"
)

// Labels are the labels of every object made for pool.
func Labels(pool string) map[string]string {
	return map[string]string{LabelName: AppName, LabelManagedBy: ManagerName, LabelPool: pool}
}

// DaemonSetName is the name of a pool's dataplane DaemonSet.
func DaemonSetName(pool string) string { return "rackcache-dataplane-" + pool }

// LegacyTokenSecretName is the Secret that held a pool's shared RPC token
// before each server checked the operator's ServiceAccount tokens; the
// operator deletes it.
func LegacyTokenSecretName(pool string) string { return "rackcache-dataplane-" + pool + "-token" }

// ServiceAccounts of the operator's namespace (config/rbac, the chart).
const (
	// OperatorServiceAccount is the operator's identity: the only caller a
	// dataplane's JSON-RPC port lets in.
	OperatorServiceAccount = "rackcache-operator"
	// DataplaneServiceAccount runs the dataplane pods; it may create
	// TokenReviews (ClusterRole system:auth-delegator) and nothing else.
	DataplaneServiceAccount = "rackcache-dataplane"
)

// RPCAudience is the audience of the operator's tokens for the server of
// pool on node: a token one server sees is refused by every other.
func RPCAudience(namespace, pool, node string) string {
	return "rpc.dataplane.rackcache.io/" + namespace + "/" + pool + "/" + node
}

// ServiceAccountUser is the username the API server reports for a
// ServiceAccount's tokens.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// MetricsTokenSecretName is the Secret holding the bearer token that
// scrapes of every dataplane's /metrics must present (key TokenKey): one
// for all pools of the operator's namespace, so one ServiceMonitor (or
// scrape job) reads them all. The metrics name volumes and subsystems.
const MetricsTokenSecretName = "rackcache-dataplane-metrics"

// CASecretName is the Secret holding a pool's CA certificate and key (the
// operator's alone: never mounted).
func CASecretName(pool string) string { return "rackcache-dataplane-" + pool + "-ca" }

// TLSSecretName is the Secret holding a pool's server certificate, key and
// CA certificate (mounted by the dataplane pods).
func TLSSecretName(pool string) string { return "rackcache-dataplane-" + pool + "-tls" }

// CephKeyringSecretName is the Secret holding the cephx keyring of a
// pool's data-path user (key CephKeyringKey), copied by the operator from
// the pool's Ceph backend so the dataplane pods can mount it: Secrets of
// another namespace cannot be mounted, and the key must not travel in RPC
// parameters that the dataplane saves to its disk.
func CephKeyringSecretName(pool string) string { return "rackcache-dataplane-" + pool + "-ceph" }

// CephKeyringKey is the key of CephKeyringSecretName's Secret.
const CephKeyringKey = "keyring"

// ConfigMapName is the ConfigMap holding a pool's dataplane start-up
// configuration (the cache device bdevs).
func ConfigMapName(pool string) string { return "rackcache-dataplane-" + pool + "-config" }

// TLSServerName is the DNS name a pool's server certificate is issued for
// and that the operator verifies, whatever address it dials.
func TLSServerName(pool string) string { return pool + ".dataplane.rackcache.io" }

// CacheBdevName is the dataplane's name of a pool's i-th cache device.
func CacheBdevName(i int) string { return fmt.Sprintf("cache%d", i) }

// Server is one cache server of a pool: a dataplane pod and its Node.
type Server struct {
	// NodeName is the Node the pod runs on; it names the server.
	NodeName string
	// Rack is the value of the pool's rack label on the Node ("" if unset).
	Rack string
	// Address is where the server listens, for JSON-RPC and NVMe/TCP: the
	// pod's IP, which is its node's (host network).
	Address string
	// PodName is the dataplane pod's name.
	PodName string
	// PodReady is the pod's Ready condition; a pod without an address or
	// with a deletion timestamp is never ready.
	PodReady bool
	// NodeReady is the Node's Ready condition.
	NodeReady bool
}

// List returns the servers of pool, sorted by node name: the dataplane pods
// labelled with the pool in namespace that are bound to a node. A node
// whose Node object is gone is skipped (the pod is about to go too).
func List(ctx context.Context, r client.Reader, namespace string, pool *rcv1.CachePool) ([]Server, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{LabelPool: pool.Name, LabelName: AppName}); err != nil {
		return nil, fmt.Errorf("list dataplane pods of pool %s: %w", pool.Name, err)
	}
	rackLabel := pool.Spec.Placement.RackLabel
	if rackLabel == "" {
		rackLabel = rcv1.DefaultRackLabel
	}
	var out []Server
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		var node corev1.Node
		if err := r.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &node); err != nil {
			if client.IgnoreNotFound(err) == nil {
				continue
			}
			return nil, fmt.Errorf("get node %s of pod %s: %w", pod.Spec.NodeName, pod.Name, err)
		}
		s := Server{
			NodeName:  node.Name,
			Rack:      node.Labels[rackLabel],
			Address:   pod.Status.PodIP,
			PodName:   pod.Name,
			PodReady:  podReady(pod),
			NodeReady: nodeReady(&node),
		}
		out = append(out, s)
	}
	// Two pods on one node (a rollout): the ready one sorts first and stays.
	slices.SortFunc(out, func(a, b Server) int {
		if c := cmp.Compare(a.NodeName, b.NodeName); c != 0 {
			return c
		}
		return cmp.Compare(readyRank(a), readyRank(b))
	})
	out = slices.CompactFunc(out, func(a, b Server) bool { return a.NodeName == b.NodeName })
	return out, nil
}

func readyRank(s Server) int {
	if s.PodReady {
		return 0
	}
	return 1
}

func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
