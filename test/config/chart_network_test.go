package config

import (
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The local cluster's values (hack/cluster/values.yaml: no pod network, no
// service proxy) put the operator and the CSI controller on the host
// network, point every container's Kubernetes client at kubernetesAPI and
// give the node plugin its portal map; the defaults do none of it.
func TestChartNetworkValues(t *testing.T) {
	local := renderChart(t, "--values", filepath.Join(chartDir(), "..", "..", "hack", "cluster", "values.yaml"))
	defaults := renderChart(t)
	for _, tc := range []struct {
		name    string
		local   bool // whether the local values apply to this render
		specsOf func() map[string]corev1.PodSpec
	}{
		{"local", true, func() map[string]corev1.PodSpec { return podSpecs(t, local) }},
		{"defaults", false, func() map[string]corev1.PodSpec { return podSpecs(t, defaults) }},
	} {
		for name, spec := range tc.specsOf() {
			wantHostNetwork := tc.local || name == "rackcache-csi-node"
			if spec.HostNetwork != wantHostNetwork {
				t.Errorf("%s: %s hostNetwork %v, want %v", tc.name, name, spec.HostNetwork, wantHostNetwork)
			}
			for _, c := range spec.Containers {
				host, port := envValue(c, "KUBERNETES_SERVICE_HOST"), envValue(c, "KUBERNETES_SERVICE_PORT")
				if tc.local && (host != "127.0.0.1" || port != "6443") {
					t.Errorf("%s: %s/%s reaches the API at %q:%q, want 127.0.0.1:6443", tc.name, name, c.Name, host, port)
				}
				if !tc.local && (host != "" || port != "") {
					t.Errorf("%s: %s/%s overrides the API address (%q:%q)", tc.name, name, c.Name, host, port)
				}
			}
			if name == "rackcache-csi-node" {
				has := slices.Contains(spec.Containers[0].Args, "--portal-map=10.0.4.1:4420=10.0.3.100:4420")
				if has != tc.local {
					t.Errorf("%s: node plugin args %v (portal map expected: %v)", tc.name, spec.Containers[0].Args, tc.local)
				}
			}
		}
	}
}

// podSpecs are the pod templates of the chart's operator, CSI controller and
// CSI node plugin.
func podSpecs(t *testing.T, objs []*unstructured.Unstructured) map[string]corev1.PodSpec {
	t.Helper()
	out := map[string]corev1.PodSpec{}
	for _, name := range []string{"rackcache-operator", "rackcache-csi-controller"} {
		out[name] = typed[appsv1.Deployment](t, find(t, objs, "Deployment", name)).Spec.Template.Spec
	}
	out["rackcache-csi-node"] = typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "rackcache-csi-node")).Spec.Template.Spec
	return out
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
