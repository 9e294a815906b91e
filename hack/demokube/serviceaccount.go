package main

import (
	"fmt"
	"net/url"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// serviceAccountMount is where a pod finds its ServiceAccount's token, the
// apiserver's CA and its namespace.
const serviceAccountMount = "/var/run/secrets/kubernetes.io/serviceaccount"

// serviceAccountTokenSeconds is the life of a pod's token: the demo's
// kubelet does not refresh it, a container restart does.
const serviceAccountTokenSeconds = 24 * 3600

// serviceAccountVolume writes what the ServiceAccount admission plugin and
// the kubelet give a pod (envtest's apiserver runs without that plugin): a
// token of the pod's ServiceAccount bound to the pod, the apiserver's CA
// and the namespace. It returns the directory, "" when the pod opts out.
func (p *localPod) serviceAccountVolume() (string, error) {
	if !ptr.Deref(p.pod.Spec.AutomountServiceAccountToken, true) {
		return "", nil
	}
	name := p.pod.Spec.ServiceAccountName
	if name == "" {
		name = "default"
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: p.pod.Namespace, Name: name}}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](serviceAccountTokenSeconds),
	}}
	if p.pod.UID != "" {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.pod.Name, UID: p.pod.UID}
	}
	if err := p.k.c.SubResource("token").Create(p.ctx, sa, req); err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", p.pod.Namespace, name, err)
	}
	dir := filepath.Join(p.dir(), "kube-api-access")
	files := map[string][]byte{
		"token":     []byte(req.Status.Token),
		"ca.crt":    p.k.api.CAData,
		"namespace": []byte(p.pod.Namespace),
	}
	return dir, writeFiles(dir, files, ptr.To[int32](0o600))
}

// serviceEnv is what the kubelet tells every container about the
// apiserver (the demo's has no Service address: the real one).
func (k *kubelet) serviceEnv() (map[string]string, error) {
	u, err := url.Parse(k.api.Host)
	if err != nil {
		return nil, fmt.Errorf("the apiserver's address %q: %w", k.api.Host, err)
	}
	return map[string]string{"KUBERNETES_SERVICE_HOST": u.Hostname(), "KUBERNETES_SERVICE_PORT": u.Port()}, nil
}
