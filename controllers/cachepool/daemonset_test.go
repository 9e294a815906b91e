package cachepool

import (
	"encoding/json"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
)

// testAccess is the operator's identity as the DaemonSets name it.
var testAccess = ServerAccess{Caller: "system:serviceaccount:rackcache-system:rackcache-operator"}

// renderDS renders the DaemonSet and decodes it into the typed object the
// apiserver would hold, so the assertions read like a manifest.
func renderDS(t *testing.T, pool *rcv1.CachePool) *appsv1.DaemonSet {
	t.Helper()
	return renderDSWith(t, pool, testAccess)
}

func renderDSWith(t *testing.T, pool *rcv1.CachePool, access ServerAccess) *appsv1.DaemonSet {
	t.Helper()
	raw, err := json.Marshal(desiredDaemonSet(pool, "rackcache-system", "abc123", access))
	if err != nil {
		t.Fatalf("encode DaemonSet: %v", err)
	}
	var ds appsv1.DaemonSet
	if err := json.Unmarshal(raw, &ds); err != nil {
		t.Fatalf("decode DaemonSet: %v", err)
	}
	return &ds
}

func TestDesiredDaemonSetMetadataAndScheduling(t *testing.T) {
	pool := testPool("fast")
	pool.Spec.Tolerations = []corev1.Toleration{
		{Key: "rackcache.io/cache-only", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
	}
	ds := renderDS(t, pool)

	if ds.Name != "rackcache-dataplane-fast" || ds.Namespace != "rackcache-system" {
		t.Errorf("name %s/%s, want rackcache-system/rackcache-dataplane-fast", ds.Namespace, ds.Name)
	}
	if !equality.Semantic.DeepEqual(ds.Labels, servers.Labels("fast")) {
		t.Errorf("labels %v, want %v", ds.Labels, servers.Labels("fast"))
	}
	if len(ds.OwnerReferences) != 1 {
		t.Fatalf("owner references %v, want one", ds.OwnerReferences)
	}
	own := ds.OwnerReferences[0]
	if own.Kind != "CachePool" || own.Name != "fast" || own.UID != pool.UID || !ptr.Deref(own.Controller, false) || own.APIVersion != "rackcache.io/v1alpha1" {
		t.Errorf("owner reference %+v, want controller CachePool fast", own)
	}
	sel := ds.Spec.Selector.MatchLabels
	for k, v := range sel {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if sel[servers.LabelPool] != "fast" {
		t.Errorf("selector %v does not pick the pool's pods", sel)
	}
	if ds.Spec.Template.Annotations[ConfigHashAnnotation] != "abc123" {
		t.Errorf("template annotations %v, want the config hash", ds.Spec.Template.Annotations)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("update strategy %+v, want RollingUpdate maxUnavailable 1", ds.Spec.UpdateStrategy)
	}
	spec := ds.Spec.Template.Spec
	if !equality.Semantic.DeepEqual(spec.NodeSelector, pool.Spec.NodeSelector) {
		t.Errorf("node selector %v, want %v", spec.NodeSelector, pool.Spec.NodeSelector)
	}
	if !equality.Semantic.DeepEqual(spec.Tolerations, pool.Spec.Tolerations) {
		t.Errorf("tolerations %+v, want %+v", spec.Tolerations, pool.Spec.Tolerations)
	}
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v dnsPolicy %s, want host network with ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
	}
}

func TestDesiredDaemonSetContainer(t *testing.T) {
	withResources := testPool("res")
	withResources.Spec.ImagePullPolicy = corev1.PullAlways
	withResources.Spec.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
	}
	withPort := testPool("port")
	withPort.Spec.Port = 4421
	polling := testPool("poll")
	polling.Spec.BusyPoll = "50us"
	cases := []struct {
		name       string
		pool       *rcv1.CachePool
		pullPolicy corev1.PullPolicy
		resources  corev1.ResourceRequirements
		nvmePort   int32
		extraArgs  []string
	}{
		{"defaults", testPool("plain"), "", corev1.ResourceRequirements{}, 4420, nil},
		{"resources and pull policy", withResources, corev1.PullAlways, withResources.Spec.Resources, 4420, nil},
		{"other NVMe/TCP port", withPort, "", corev1.ResourceRequirements{}, 4421, nil},
		{"busy polling", polling, "", corev1.ResourceRequirements{}, 4420, []string{"--busy-poll", "50us"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := renderDS(t, tc.pool)
			if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
				t.Fatalf("%d containers, want 1", n)
			}
			c := ds.Spec.Template.Spec.Containers[0]
			if c.Image != tc.pool.Spec.Image || c.ImagePullPolicy != tc.pullPolicy {
				t.Errorf("image %s pull %q, want %s pull %q", c.Image, c.ImagePullPolicy, tc.pool.Spec.Image, tc.pullPolicy)
			}
			if !equality.Semantic.DeepEqual(c.Resources, tc.resources) {
				t.Errorf("resources %+v, want %+v", c.Resources, tc.resources)
			}
			if c.SecurityContext == nil || !ptr.Deref(c.SecurityContext.Privileged, false) {
				t.Errorf("container is not privileged: %+v", c.SecurityContext)
			}
			wantArgs := []string{
				"--rpc-socket", "/var/run/rackcache/spdk.sock",
				"--rpc-listen=$(POD_IP):5260",
				"--rpc-token-audience", "rpc.dataplane.rackcache.io/rackcache-system/" + tc.pool.Name + "/$(NODE_NAME)",
				"--rpc-allowed-caller", "system:serviceaccount:rackcache-system:rackcache-operator",
				"--kube-ca-file", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
				"--kube-token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token",
				"--rpc-tls-cert", "/etc/rackcache/tls/tls.crt",
				"--rpc-tls-key", "/etc/rackcache/tls/tls.key",
				"--metrics-listen=$(POD_IP):9560",
				"--metrics-token-file", "/etc/rackcache/metrics/token",
				"--ceph-keyring", "/etc/rackcache/ceph/keyring",
				"--config", "/etc/rackcache/config/config.json",
				"--config-persist", "/var/lib/rackcache/" + tc.pool.Name + "/config.json",
				"--log-format", "json",
			}
			wantArgs = append(wantArgs, tc.extraArgs...)
			if !slices.Equal(c.Args, wantArgs) {
				t.Errorf("args\n got %q\nwant %q", c.Args, wantArgs)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					env[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
			}
			if env["POD_IP"] != "status.podIP" || env["NODE_NAME"] != "spec.nodeName" {
				t.Errorf("env from the downward API %v, want POD_IP=status.podIP NODE_NAME=spec.nodeName", env)
			}
			if len(c.Env) != 2 {
				t.Errorf("env %+v: the API server's address is the kubelet's unless the operator is told otherwise", c.Env)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				if p.HostPort != p.ContainerPort {
					t.Errorf("port %s: host port %d differs from container port %d on a host-network pod", p.Name, p.HostPort, p.ContainerPort)
				}
				ports[p.Name] = p.ContainerPort
			}
			wantPorts := map[string]int32{"metrics": servers.MetricsPort, "rpc": servers.RPCPort, "nvme-tcp": tc.nvmePort}
			if !equality.Semantic.DeepEqual(ports, wantPorts) {
				t.Errorf("ports %v, want %v", ports, wantPorts)
			}
			for _, p := range []struct {
				probe *corev1.Probe
				path  string
			}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "metrics" {
					t.Errorf("probe %+v, want HTTP GET %s on the metrics port", p.probe, p.path)
				}
			}
		})
	}
}

func TestDesiredDaemonSetVolumes(t *testing.T) {
	pool := testPool("vols")
	ds := renderDS(t, pool)
	spec := ds.Spec.Template.Spec
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range spec.Containers[0].VolumeMounts {
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("mount %s has no volume", m.Name)
		}
		mounts[m.Name] = m
	}
	if len(vols) != len(mounts) {
		t.Errorf("%d volumes but %d mounts", len(vols), len(mounts))
	}

	for i, d := range pool.Spec.Devices {
		v := vols[deviceVolumeName(i)]
		if v.HostPath == nil || v.HostPath.Path != d.Path {
			t.Errorf("device %d: volume %+v, want hostPath %s", i, v, d.Path)
		}
		if m := mounts[deviceVolumeName(i)]; m.MountPath != d.Path {
			t.Errorf("device %d mounted at %q, want its node path %s", i, m.MountPath, d.Path)
		}
	}
	for name, secret := range map[string]string{volTLS: servers.TLSSecretName("vols"), volCeph: servers.CephKeyringSecretName("vols"), volMetrics: servers.MetricsTokenSecretName} {
		v := vols[name]
		if v.Secret == nil || v.Secret.SecretName != secret || ptr.Deref(v.Secret.DefaultMode, 0) != 0o400 {
			t.Errorf("volume %s: %+v, want Secret %s with mode 0400", name, v.VolumeSource, secret)
		}
		if !mounts[name].ReadOnly {
			t.Errorf("secret volume %s is mounted read-write", name)
		}
	}
	if v := vols[volConfig]; v.ConfigMap == nil || v.ConfigMap.Name != servers.ConfigMapName("vols") {
		t.Errorf("config volume %+v, want ConfigMap %s", v.VolumeSource, servers.ConfigMapName("vols"))
	}
	if v := vols[volPersist]; v.HostPath == nil || v.HostPath.Path != "/var/lib/rackcache/vols" ||
		ptr.Deref(v.HostPath.Type, "") != corev1.HostPathDirectoryOrCreate {
		t.Errorf("persist volume %+v, want hostPath /var/lib/rackcache/vols DirectoryOrCreate", v.VolumeSource)
	}
	if v := vols[volSocket]; v.EmptyDir == nil {
		t.Errorf("socket volume %+v, want an emptyDir", v.VolumeSource)
	}
	if m := mounts[volSocket]; m.MountPath != "/var/run/rackcache" {
		t.Errorf("socket volume mounted at %s, want /var/run/rackcache", m.MountPath)
	}
}

// The pods run as the dataplane's ServiceAccount (it may review tokens,
// nothing else), mount no RPC token, and reach the API server where the
// operator was told to point them.
func TestDesiredDaemonSetIdentity(t *testing.T) {
	spec := renderDS(t, testPool("id")).Spec.Template.Spec
	if spec.ServiceAccountName != servers.DataplaneServiceAccount || !ptr.Deref(spec.AutomountServiceAccountToken, false) {
		t.Errorf("serviceAccountName %q automount %v, want %s with its token mounted", spec.ServiceAccountName, spec.AutomountServiceAccountToken, servers.DataplaneServiceAccount)
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == servers.LegacyTokenSecretName("id") {
			t.Errorf("volume %s mounts the former shared RPC token", v.Name)
		}
	}
	local := renderDSWith(t, testPool("id"), ServerAccess{Caller: testAccess.Caller, APIHost: "127.0.0.1", APIPort: "6443"})
	env := map[string]string{}
	for _, e := range local.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("env %v, want the API server at 127.0.0.1:6443", env)
	}
}

func TestDesiredDaemonSetIsDeterministic(t *testing.T) {
	a, _ := json.Marshal(desiredDaemonSet(testPool("p"), "ns", "h", testAccess))
	b, _ := json.Marshal(desiredDaemonSet(testPool("p"), "ns", "h", testAccess))
	if string(a) != string(b) {
		t.Errorf("two renders differ:\n%s\n%s", a, b)
	}
}
