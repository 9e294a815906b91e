package config

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rackcache/rackcache/test/framework"
)

// The Helm chart (charts/rackcache): helm lint, its defaults and a
// StorageClass rendered and created in a real kube-apiserver with the
// chart's CRDs, RBAC asked of the apiserver's authorizer, and the values
// schema refusing bad values with a message that names them.

// chartKubeVersion is the Kubernetes version the chart is rendered for
// (the envtest apiserver's).
const chartKubeVersion = "1.34.4"

func helmBinary(t *testing.T) string {
	t.Helper()
	helm := filepath.Join(framework.RepoRoot(), "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		run(t, framework.HackScript("deps.sh"), "go-tools")
	}
	return helm
}

func chartDir() string { return filepath.Join(framework.RepoRoot(), "charts", "rackcache") }

// renderChart runs helm template into the operator's namespace.
func renderChart(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	full := append([]string{"template", "rackcache", chartDir(), "--namespace", namespace, "--kube-version", chartKubeVersion}, args...)
	return decodeManifests(t, "charts/rackcache", run(t, helmBinary(t), full...))
}

func TestChartLint(t *testing.T) {
	out, err := exec.Command(helmBinary(t), "lint", "--strict", chartDir(), "--kube-version", chartKubeVersion).CombinedOutput()
	if err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
}

func TestChartAccepted(t *testing.T) {
	objs := renderChart(t, "--values", filepath.Join(chartDir(), "ci", "writeback-values.yaml"))
	rule := find(t, objs, "PrometheusRule", "rackcache")
	if groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups"); len(groups) != 1 {
		t.Errorf("PrometheusRule groups: %v", rule.Object["spec"])
	}
	for _, name := range []string{"rackcache-operator", "rackcache-dataplane"} {
		find(t, objs, "ServiceMonitor", name)
	}
	vsc := find(t, objs, "VolumeSnapshotClass", "rackcache")
	if vsc.Object["driver"] != "csi.rackcache.io" {
		t.Errorf("VolumeSnapshotClass: %v", vsc.Object)
	}
	// The snapshot CRDs are external-snapshotter's, not in this apiserver.
	objs = slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetKind() == "VolumeSnapshotClass" })

	// The images are rackcache's own and the sidecars'; the node plugin
	// and the controller get the rack label.
	dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", deploymentName))
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/rackcache/rackcache-operator:0.1.0" {
		t.Errorf("operator image %s", img)
	}
	csiCtrl := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "rackcache-csi-controller"))
	for _, sidecar := range []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"} {
		container(t, csiCtrl.Spec.Template.Spec, sidecar)
	}
	bin := csiBinary(t)
	checkArgs(t, bin, container(t, csiCtrl.Spec.Template.Spec, "csi-controller").Args)
	node := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "rackcache-csi-node"))
	checkArgs(t, bin, container(t, node.Spec.Template.Spec, "csi-node").Args)
	checkOperatorArgs(t, dep.Spec.Template.Spec.Containers[0].Args)
	sc := typed[storagev1.StorageClass](t, find(t, objs, "StorageClass", "rackcache-writeback"))
	if sc.Parameters["cachePool"] != "fast" || sc.Parameters["csi.storage.k8s.io/controller-expand-secret-namespace"] != namespace ||
		sc.Parameters["keepAliveTmo"] != "5" || sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion ||
		sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		t.Errorf("StorageClass: %+v", sc)
	}
	// The node gets the volume's host keys from the Secret the operator
	// keeps in its namespace, at stage and at every republish.
	for _, p := range []string{"node-stage", "node-publish"} {
		if sc.Parameters["csi.storage.k8s.io/"+p+"-secret-name"] != "rackcache-keys-${pv.name}" ||
			sc.Parameters["csi.storage.k8s.io/"+p+"-secret-namespace"] != namespace {
			t.Errorf("StorageClass %s secret: %v", p, sc.Parameters)
		}
	}

	crds, err := filepath.Glob(filepath.Join(chartDir(), "crds", "*.yaml"))
	if err != nil || len(crds) != 2 {
		t.Fatalf("chart CRDs: %v, %v", crds, err)
	}
	// The Prometheus Operator's CRDs come through the Go module proxy.
	monitoring := true
	for _, plural := range []string{"servicemonitors", "prometheusrules"} {
		crd, err := prometheusOperatorCRD(t, plural)
		switch {
		case err == nil:
			crds = append(crds, crd)
		case os.Getenv("CI") == "true":
			t.Fatalf("%s CRD (prometheus-operator %s) unavailable: %v", plural, prometheusOperatorVersion, err)
		default:
			t.Logf("%s CRD (prometheus-operator %s) unavailable, the monitoring objects are not created: %v", plural, prometheusOperatorVersion, err)
			monitoring = false
		}
	}
	if !monitoring {
		objs = slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetAPIVersion() == "monitoring.coreos.com/v1" })
	}
	_, cfg := framework.StartEnvtest(t, crds...)
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(namespace)
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	for _, u := range objs {
		if err := c.Create(ctx, u.DeepCopy()); err != nil {
			t.Errorf("the apiserver refused %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	// The same least privilege as config/ (the rules are config/'s).
	expectAccess(ctx, t, c, deploymentName, []access{
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}, true},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "secrets"}, true},
		{authzv1.ResourceAttributes{Verb: "update", Group: "rackcache.io", Resource: "cachedvolumes", Subresource: "status"}, true},
		{authzv1.ResourceAttributes{Namespace: "rook-ceph", Verb: "list", Resource: "secrets"}, false},
		{authzv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}, false},
	})
	expectAccess(ctx, t, c, "rackcache-csi-controller", []access{
		{authzv1.ResourceAttributes{Verb: "create", Group: "rackcache.io", Resource: "cachedvolumes"}, true},
		{authzv1.ResourceAttributes{Verb: "patch", Resource: "persistentvolumeclaims", Subresource: "status"}, true},
		{authzv1.ResourceAttributes{Verb: "update", Group: "rackcache.io", Resource: "cachepools"}, false},
	})
	expectAccess(ctx, t, c, "rackcache-csi-node", []access{
		{authzv1.ResourceAttributes{Verb: "get", Resource: "nodes"}, true},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "get", Resource: "secrets"}, false},
		// Following volumes' paths: read CachedVolumes, never change them.
		{authzv1.ResourceAttributes{Verb: "watch", Group: "rackcache.io", Resource: "cachedvolumes"}, true},
		{authzv1.ResourceAttributes{Verb: "update", Group: "rackcache.io", Resource: "cachedvolumes", Subresource: "status"}, false},
	})
}

// checkOperatorArgs: every flag the chart passes is one the operator has.
func checkOperatorArgs(t *testing.T, args []string) {
	t.Helper()
	flags := operatorFlags(t, operatorBinary(t))
	for _, a := range args {
		name := strings.SplitN(strings.TrimLeft(a, "-"), "=", 2)[0]
		if !flags[name] {
			t.Errorf("the chart passes %s, which rackcache-operator does not have", a)
		}
	}
}

// Bad values are refused before anything renders, naming what is wrong.
// image.digests pins rackcache's own images: every container of the
// operator and the CSI driver then names its image by tag and digest.
func TestChartPinsImagesByDigest(t *testing.T) {
	digests := map[string]string{
		"rackcache-operator": "sha256:" + strings.Repeat("1a", 32),
		"rackcache-csi":      "sha256:" + strings.Repeat("2b", 32),
	}
	var args []string
	for name, d := range digests {
		args = append(args, "--set", "image.digests."+name+"="+d)
	}
	pinned := 0
	for _, u := range renderChart(t, args...) {
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			image, _ := c.(map[string]any)["image"].(string)
			for name, d := range digests {
				if strings.HasPrefix(image, "ghcr.io/rackcache/"+name+":") {
					if want := "ghcr.io/rackcache/" + name + ":0.1.0@" + d; image != want {
						t.Errorf("%s %s: image %s, want %s", u.GetKind(), u.GetName(), image, want)
					}
					pinned++
				}
			}
		}
	}
	if pinned != 3 {
		t.Errorf("%d containers run rackcache's images, want 3 (operator, CSI controller, CSI node)", pinned)
	}
}

func TestChartSchemaRefusesBadValues(t *testing.T) {
	cases := []struct {
		set  string
		want string
	}{
		{"operator.replicas=0", "/operator/replicas"},
		{"operator.statusInterval=soon", "/operator/statusInterval"},
		{"csi.node.kubeletDir=var/lib/kubelet", "/csi/node/kubeletDir"},
		{"storageClasses[0].name=x", "missing properties 'cachePool', 'pool'"},
		{"storageClasses[0].name=x,storageClasses[0].cachePool=p,storageClasses[0].pool=rbd,storageClasses[0].writeMode=Fast", "/storageClasses/0/writeMode"},
		{"operator.replica=2", "additional properties 'replica' not allowed"},
		{"csi.node.portalMap={10.0.4.1:4420}", "/csi/node/portalMap/0"},
		{"kubernetesAPI.port=0", "/kubernetesAPI/port"},
		{"image.digests.rackcache-csi=sha256:abc", "/image/digests/rackcache-csi"},
		{"image.digests.busybox=sha256:" + strings.Repeat("0", 64), "value must be one of"},
	}
	for _, tc := range cases {
		out, err := exec.Command(helmBinary(t), "template", "rackcache", chartDir(), "--kube-version", chartKubeVersion, "--set", tc.set).CombinedOutput()
		if err == nil {
			t.Errorf("--set %s was accepted", tc.set)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("--set %s: the refusal does not say %q:\n%s", tc.set, tc.want, out)
		}
	}
}
