package cachepool

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
)

// Paths inside the dataplane container.
const (
	containerName = "dataplane"
	// ConfigHashAnnotation on the pod template is the hash of the start-up
	// configuration, so a device change rolls the pods.
	ConfigHashAnnotation = "rackcache.io/config-hash"

	socketDir  = "/var/run/rackcache"
	configDir  = "/etc/rackcache/config"
	tlsDir     = "/etc/rackcache/tls"
	cephDir    = "/etc/rackcache/ceph"
	metricsDir = "/etc/rackcache/metrics"
	persistDir = "/var/lib/rackcache"

	volSocket  = "rpc-socket"
	volConfig  = "config"
	volTLS     = "rpc-tls"
	volCeph    = "ceph-keyring"
	volMetrics = "metrics-token"
	volPersist = "persist"
)

// saDir is where the kubelet mounts the pod's ServiceAccount token and the
// API server's CA.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// ServerAccess is how a pool's servers check the operator's JSON-RPC calls:
// each server asks the API server to review the bearer token
// (TokenReview) for an audience naming the pool and its node, and lets in
// Caller only.
type ServerAccess struct {
	// Caller is the operator's username (servers.ServiceAccountUser).
	Caller string
	// APIHost and APIPort, when APIHost is set, point the servers at the
	// API server (clusters without a service proxy, like the chart's
	// kubernetesAPI value); else the kubelet's in-cluster address is used.
	APIHost, APIPort string
}

// secretFileMode: the tokens and the server key are readable by the
// dataplane's user only.
const secretFileMode int32 = 0o400

// deviceVolumeName names the hostPath volume of the pool's i-th device.
func deviceVolumeName(i int) string { return "cache-device-" + strconv.Itoa(i) }

// persistPath is where a server keeps its configuration across restarts,
// one directory per pool so two pools on a node never share a file.
func persistPath(pool string) string { return persistDir + "/" + pool }

// dataplaneArgs are the dataplane's flags; $(POD_IP) and $(NODE_NAME) are
// expanded by the kubelet from the container's environment.
func dataplaneArgs(pool *rcv1.CachePool, namespace string, access ServerAccess) []string {
	args := []string{
		"--rpc-socket", socketDir + "/spdk.sock",
		fmt.Sprintf("--rpc-listen=$(POD_IP):%d", servers.RPCPort),
		"--rpc-token-audience", servers.RPCAudience(namespace, pool.Name, "$(NODE_NAME)"),
		"--rpc-allowed-caller", access.Caller,
		"--kube-ca-file", saDir + "/ca.crt",
		"--kube-token-file", saDir + "/token",
		"--rpc-tls-cert", tlsDir + "/" + servers.TLSCertKey,
		"--rpc-tls-key", tlsDir + "/" + servers.TLSKeyKey,
		fmt.Sprintf("--metrics-listen=$(POD_IP):%d", servers.MetricsPort),
		"--metrics-token-file", metricsDir + "/" + servers.TokenKey,
		"--ceph-keyring", cephDir + "/" + servers.CephKeyringKey,
		"--config", configDir + "/" + ConfigKey,
		"--config-persist", persistPath(pool.Name) + "/config.json",
		"--log-format", "json",
	}
	if pool.Spec.BusyPoll != "" {
		args = append(args, "--busy-poll", pool.Spec.BusyPoll)
	}
	return args
}

// desiredDaemonSet is the DaemonSet running pool's dataplane on every node
// its node selector picks; configHash is configHash(the ConfigMap content).
func desiredDaemonSet(pool *rcv1.CachePool, namespace, configHash string, access ServerAccess) *appsv1ac.DaemonSetApplyConfiguration {
	labels := servers.Labels(pool.Name)
	selector := map[string]string{servers.LabelName: servers.AppName, servers.LabelPool: pool.Name}
	// One server at a time: each holds its own volumes' cache data, so the
	// others keep serving while one restarts and recovers its volumes from
	// the persisted configuration. No surge: host ports allow one pod per node.
	strategy := appsv1ac.DaemonSetUpdateStrategy().
		WithType(appsv1.RollingUpdateDaemonSetStrategyType).
		WithRollingUpdate(appsv1ac.RollingUpdateDaemonSet().WithMaxUnavailable(intstr.FromInt32(1)))
	return appsv1ac.DaemonSet(servers.DaemonSetName(pool.Name), namespace).
		WithLabels(labels).
		WithOwnerReferences(ownerReference(pool)).
		WithSpec(appsv1ac.DaemonSetSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
			WithUpdateStrategy(strategy).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithAnnotations(map[string]string{ConfigHashAnnotation: configHash}).
				WithSpec(podSpec(pool, namespace, access))))
}

func podSpec(pool *rcv1.CachePool, namespace string, access ServerAccess) *corev1ac.PodSpecApplyConfiguration {
	spec := corev1ac.PodSpec().
		WithNodeSelector(pool.Spec.NodeSelector).
		// Its token lets the server create TokenReviews, nothing else.
		WithServiceAccountName(servers.DataplaneServiceAccount).
		WithAutomountServiceAccountToken(true).
		// NVMe/TCP hosts and the operator reach the server at its node's
		// address; the pod still resolves cluster names.
		WithHostNetwork(true).
		WithDNSPolicy(corev1.DNSClusterFirstWithHostNet).
		WithContainers(container(pool, namespace, access)).
		WithVolumes(volumes(pool)...)
	for i := range pool.Spec.Tolerations {
		spec.WithTolerations(toleration(&pool.Spec.Tolerations[i]))
	}
	return spec
}

func container(pool *rcv1.CachePool, namespace string, access ServerAccess) *corev1ac.ContainerApplyConfiguration {
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName("POD_IP").WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("status.podIP"))),
		corev1ac.EnvVar().WithName("NODE_NAME").WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("spec.nodeName"))),
	}
	if access.APIHost != "" {
		// Container env wins over what the kubelet injects.
		env = append(env,
			corev1ac.EnvVar().WithName("KUBERNETES_SERVICE_HOST").WithValue(access.APIHost),
			corev1ac.EnvVar().WithName("KUBERNETES_SERVICE_PORT").WithValue(access.APIPort))
	}
	c := corev1ac.Container().
		WithName(containerName).
		WithImage(pool.Spec.Image).
		WithArgs(dataplaneArgs(pool, namespace, access)...).
		WithEnv(env...).
		WithPorts(
			port("metrics", servers.MetricsPort),
			port("rpc", servers.RPCPort),
			port("nvme-tcp", pool.Spec.Port),
		).
		// O_DIRECT I/O on the raw cache devices.
		WithSecurityContext(corev1ac.SecurityContext().WithPrivileged(true)).
		WithLivenessProbe(httpProbe("/healthz", 10, 3)).
		WithReadinessProbe(httpProbe("/readyz", 5, 1)).
		WithVolumeMounts(volumeMounts(pool)...)
	if pool.Spec.ImagePullPolicy != "" {
		c.WithImagePullPolicy(pool.Spec.ImagePullPolicy)
	}
	if r := resources(&pool.Spec.Resources); r != nil {
		c.WithResources(r)
	}
	return c
}

func port(name string, number int32) *corev1ac.ContainerPortApplyConfiguration {
	// Host network: the pod's ports are its node's.
	return corev1ac.ContainerPort().WithName(name).WithContainerPort(number).WithHostPort(number).WithProtocol(corev1.ProtocolTCP)
}

func httpProbe(path string, periodSeconds, failureThreshold int32) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString("metrics"))).
		WithPeriodSeconds(periodSeconds).
		WithFailureThreshold(failureThreshold)
}

func volumes(pool *rcv1.CachePool) []*corev1ac.VolumeApplyConfiguration {
	out := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(volSocket).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName(volConfig).WithConfigMap(corev1ac.ConfigMapVolumeSource().
			WithName(servers.ConfigMapName(pool.Name))),
		corev1ac.Volume().WithName(volTLS).WithSecret(corev1ac.SecretVolumeSource().
			WithSecretName(servers.TLSSecretName(pool.Name)).WithDefaultMode(secretFileMode)),
		corev1ac.Volume().WithName(volMetrics).WithSecret(corev1ac.SecretVolumeSource().
			WithSecretName(servers.MetricsTokenSecretName).WithDefaultMode(secretFileMode)),
		// Optional: the pods start (and report) while the Ceph backend
		// cannot be resolved yet; the kubelet adds the file when it comes.
		corev1ac.Volume().WithName(volCeph).WithSecret(corev1ac.SecretVolumeSource().
			WithSecretName(servers.CephKeyringSecretName(pool.Name)).WithDefaultMode(secretFileMode).WithOptional(true)),
		corev1ac.Volume().WithName(volPersist).WithHostPath(corev1ac.HostPathVolumeSource().
			WithPath(persistPath(pool.Name)).WithType(corev1.HostPathDirectoryOrCreate)),
	}
	for i, d := range pool.Spec.Devices {
		// No hostPath type: a device may be a block device or a file.
		out = append(out, corev1ac.Volume().WithName(deviceVolumeName(i)).
			WithHostPath(corev1ac.HostPathVolumeSource().WithPath(d.Path)))
	}
	return out
}

func volumeMounts(pool *rcv1.CachePool) []*corev1ac.VolumeMountApplyConfiguration {
	out := []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName(volSocket).WithMountPath(socketDir),
		corev1ac.VolumeMount().WithName(volConfig).WithMountPath(configDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName(volTLS).WithMountPath(tlsDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName(volCeph).WithMountPath(cephDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName(volMetrics).WithMountPath(metricsDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName(volPersist).WithMountPath(persistPath(pool.Name)),
	}
	// Each device at its node path, so the configuration's filenames hold.
	for i, d := range pool.Spec.Devices {
		out = append(out, corev1ac.VolumeMount().WithName(deviceVolumeName(i)).WithMountPath(d.Path))
	}
	return out
}

func toleration(t *corev1.Toleration) *corev1ac.TolerationApplyConfiguration {
	out := corev1ac.Toleration()
	if t.Key != "" {
		out.WithKey(t.Key)
	}
	if t.Operator != "" {
		out.WithOperator(t.Operator)
	}
	if t.Value != "" {
		out.WithValue(t.Value)
	}
	if t.Effect != "" {
		out.WithEffect(t.Effect)
	}
	if t.TolerationSeconds != nil {
		out.WithTolerationSeconds(*t.TolerationSeconds)
	}
	return out
}

func resources(r *corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	if len(r.Limits) == 0 && len(r.Requests) == 0 && len(r.Claims) == 0 {
		return nil
	}
	out := corev1ac.ResourceRequirements()
	if len(r.Limits) > 0 {
		out.WithLimits(r.Limits)
	}
	if len(r.Requests) > 0 {
		out.WithRequests(r.Requests)
	}
	for _, c := range r.Claims {
		rc := corev1ac.ResourceClaim().WithName(c.Name)
		if c.Request != "" {
			rc.WithRequest(c.Request)
		}
		out.WithClaims(rc)
	}
	return out
}

// ownerReference makes pool the controller of an object, so it goes with
// the pool (a namespaced object may have a cluster-scoped owner).
func ownerReference(pool *rcv1.CachePool) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(rcv1.GroupVersion.String()).
		WithKind("CachePool").
		WithName(pool.Name).
		WithUID(pool.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}
