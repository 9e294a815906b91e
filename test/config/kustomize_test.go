// Package config checks what `kustomize build config/default` installs: the
// operator's Deployment agrees with its RBAC, its metrics Service and the
// binary's own flags, and a real kube-apiserver accepts every object.
package config

import (
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rackcache/rackcache/controllers/servers"
)

const (
	namespace      = "rackcache-system"
	deploymentName = "rackcache-operator"
)

// TestDefaultOverlay checks config/default's objects against each other and
// against the operator binary.
func TestDefaultOverlay(t *testing.T) {
	objs := buildOverlay(t, "default")
	dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", deploymentName))
	if n := len(dep.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("operator Deployment has %d containers, want 1", n)
	}
	ctr := dep.Spec.Template.Spec.Containers[0]

	t.Run("Namespaced objects in the operator namespace", func(t *testing.T) {
		find(t, objs, "Namespace", namespace)
		for _, u := range objs {
			switch u.GetKind() {
			case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "CSIDriver":
				if u.GetNamespace() != "" {
					t.Errorf("cluster-scoped %s %s has namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
				}
			default:
				if u.GetNamespace() != namespace {
					t.Errorf("%s %s is in namespace %q, want %q", u.GetKind(), u.GetName(), u.GetNamespace(), namespace)
				}
			}
		}
		for _, crd := range []string{"cachepools.rackcache.io", "cachedvolumes.rackcache.io"} {
			find(t, objs, "CustomResourceDefinition", crd)
		}
	})

	t.Run("Image set by the overlay", func(t *testing.T) {
		// config/manager names the image rackcache-operator; the overlay's
		// images: entry must have replaced it with a pinned reference.
		repo, tag, ok := strings.Cut(ctr.Image, ":")
		if !ok || !strings.Contains(repo, "/") || tag == "" || tag == "latest" {
			t.Errorf("operator image %q, want a registry path with a pinned tag", ctr.Image)
		}
	})

	t.Run("Arguments are flags of the binary", func(t *testing.T) {
		bin := operatorBinary(t)
		flags := operatorFlags(t, bin)
		for _, arg := range ctr.Args {
			name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if !strings.HasPrefix(arg, "--") || !flags[name] {
				t.Errorf("Deployment argument %q is not a flag of rackcache-operator (flags: %v)", arg, mapKeys(flags))
			}
		}
		// The binary parses every value before --help ends it: a bad
		// duration or an unknown flag exits non-zero.
		if out, err := exec.Command(bin, append(slices.Clone(ctr.Args), "--help")...).CombinedOutput(); err != nil {
			t.Errorf("rackcache-operator %s: %v\n%s", strings.Join(ctr.Args, " "), err, out)
		}
		if !slices.Contains(ctr.Args, "--leader-elect") {
			t.Errorf("Deployment runs %d replicas without --leader-elect", ptrValue(dep.Spec.Replicas))
		}
	})

	t.Run("Probes and metrics on the ports the flags bind", func(t *testing.T) {
		probePort := flagPort(t, ctr.Args, "health-probe-bind-address")
		metricsPort := flagPort(t, ctr.Args, "metrics-bind-address")
		for name, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe missing or not HTTP", name)
				continue
			}
			if got := containerPort(t, ctr, p.HTTPGet.Port); got != probePort {
				t.Errorf("%s probe on port %d, --health-probe-bind-address binds %d", name, got, probePort)
			}
		}
		if p := ctr.LivenessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/healthz" {
			t.Errorf("liveness probe path %q, want /healthz", p.HTTPGet.Path)
		}
		if p := ctr.ReadinessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/readyz" {
			t.Errorf("readiness probe path %q, want /readyz", p.HTTPGet.Path)
		}
		svc := typed[corev1.Service](t, find(t, objs, "Service", "rackcache-operator-metrics"))
		if !selects(svc.Spec.Selector, dep.Spec.Template.Labels) {
			t.Errorf("metrics Service selector %v does not select the operator pods %v", svc.Spec.Selector, dep.Spec.Template.Labels)
		}
		if len(svc.Spec.Ports) != 1 || containerPort(t, ctr, svc.Spec.Ports[0].TargetPort) != metricsPort {
			t.Errorf("metrics Service ports %v do not reach --metrics-bind-address's port %d", svc.Spec.Ports, metricsPort)
		}
	})

	t.Run("Service account bound to the roles", func(t *testing.T) {
		sa := dep.Spec.Template.Spec.ServiceAccountName
		find(t, objs, "ServiceAccount", sa)
		crb := typed[rbacv1.ClusterRoleBinding](t, find(t, objs, "ClusterRoleBinding", "rackcache-operator"))
		find(t, objs, "ClusterRole", crb.RoleRef.Name)
		expectSubject(t, crb.Subjects, sa)
		rb := typed[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", "rackcache-operator-leader-election"))
		role := typed[rbacv1.Role](t, find(t, objs, "Role", rb.RoleRef.Name))
		expectSubject(t, rb.Subjects, sa)
		// The generated namespaced Role (what the operator writes and
		// watches in its namespace) is bound too.
		own := typed[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", "rackcache-operator"))
		find(t, objs, "Role", own.RoleRef.Name)
		expectSubject(t, own.Subjects, sa)
		leases := false
		for _, r := range role.Rules {
			leases = leases || (slices.Contains(r.APIGroups, "coordination.k8s.io") && slices.Contains(r.Resources, "leases") && slices.Contains(r.Verbs, "update"))
		}
		if !leases {
			t.Errorf("leader election Role %s cannot update Leases: %v", role.Name, role.Rules)
		}
	})

	t.Run("Pod hardened and told its namespace", func(t *testing.T) {
		pod := dep.Spec.Template.Spec
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("pod securityContext.runAsNonRoot not true: %+v", pod.SecurityContext)
		}
		sc := ctr.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container securityContext %+v, want readOnlyRootFilesystem and no privilege escalation", sc)
		}
		if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Limits.Memory().IsZero() {
			t.Errorf("container resources %+v, want a CPU request and a memory limit", ctr.Resources)
		}
		ok := false
		for _, e := range ctr.Env {
			ok = ok || (e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace")
		}
		if !ok {
			t.Errorf("POD_NAMESPACE not set from the downward API (metadata.namespace): %v", ctr.Env)
		}
	})

	t.Run("Dataplane metrics Service", func(t *testing.T) {
		svc := typed[corev1.Service](t, find(t, objs, "Service", "rackcache-dataplane-metrics"))
		if svc.Spec.Selector[servers.LabelName] != servers.AppName || len(svc.Spec.Selector) != 1 {
			t.Errorf("dataplane metrics Service selects %v, want only %s=%s", svc.Spec.Selector, servers.LabelName, servers.AppName)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != servers.MetricsPort {
			t.Errorf("dataplane metrics Service ports %v, want target port %d", svc.Spec.Ports, servers.MetricsPort)
		}
	})

	t.Run("ServiceMonitors select the metrics Services", func(t *testing.T) {
		for _, name := range []string{"rackcache-operator", "rackcache-dataplane"} {
			sm := find(t, objs, "ServiceMonitor", name)
			sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			port := endpointPort(sm.Object)
			matched := false
			for _, u := range objs {
				if u.GetKind() != "Service" || !selects(sel, u.GetLabels()) {
					continue
				}
				svc := typed[corev1.Service](t, u)
				for _, p := range svc.Spec.Ports {
					matched = matched || p.Name == port
				}
			}
			if !matched {
				t.Errorf("ServiceMonitor %s (labels %v, port %q) selects no Service with that port", name, sel, port)
			}
		}
	})

	t.Run("the dataplane ServiceMonitor presents the operator's scrape token", func(t *testing.T) {
		sm := find(t, objs, "ServiceMonitor", "rackcache-dataplane")
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Fatalf("%d endpoints, want 1", len(eps))
		}
		ep, _ := eps[0].(map[string]any)
		typ, _, _ := unstructured.NestedString(ep, "authorization", "type")
		secret, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
		key, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "key")
		if typ != "Bearer" || secret != servers.MetricsTokenSecretName || key != servers.TokenKey {
			t.Errorf("authorization %s from %s/%s, want Bearer from %s/%s", typ, secret, key, servers.MetricsTokenSecretName, servers.TokenKey)
		}
	})
}

func expectSubject(t *testing.T, subjects []rbacv1.Subject, sa string) {
	t.Helper()
	for _, s := range subjects {
		if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == namespace {
			return
		}
	}
	t.Errorf("subjects %v do not name ServiceAccount %s/%s", subjects, namespace, sa)
}

// flagPort returns the port of a --name=host:port argument.
func flagPort(t *testing.T, args []string, name string) int {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			_, p, err := net.SplitHostPort(v)
			port, perr := strconv.Atoi(p)
			if err != nil || perr != nil {
				t.Fatalf("--%s=%s is not host:port", name, v)
			}
			return port
		}
	}
	t.Fatalf("the Deployment does not set --%s (the ports must not depend on the binary's defaults)", name)
	return 0
}

// containerPort resolves a named or numbered port of ctr.
func containerPort(t *testing.T, ctr corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range ctr.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port named %q", ctr.Name, p.StrVal)
	return 0
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func mapKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
