package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/rackcache/rackcache/test/framework"
)

// TestSecureMetricsAskTheAPIServer: with MetricsOptions' secure serving,
// the real API server (envtest) decides who reads /metrics: no token gets
// 401, a ServiceAccount without config/rbac's rackcache-metrics-reader gets
// 403, one bound to it gets the metrics.
func TestSecureMetricsAskTheAPIServer(t *testing.T) {
	_, cfg := framework.StartEnvtest(t)
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreeLoopbackPort(t))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: MetricsOptions(addr, true, ""), HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatalf("new manager: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	cs := kubernetes.NewForConfigOrDie(cfg)
	var role rbacv1.ClusterRole
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatalf("config/rbac/metrics_reader_role.yaml: %v", err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRole %s: %v", role.Name, err)
	}
	token := func(sa string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ServiceAccount %s: %v", sa, err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token of %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	reader, stranger := token("prometheus"), token("stranger")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-rackcache"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: "default"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind the reader: %v", err)
	}

	// The certificate is self-signed (no --metrics-cert-dir): only the
	// authorization is under test here.
	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	get := func(bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	// The server starts with the manager; RBAC caches settle within seconds.
	for _, tc := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"a ServiceAccount without the role", stranger, http.StatusForbidden}, {"the reader", reader, http.StatusOK}} {
		var code int
		var body string
		for ctx.Err() == nil {
			code, body, err = get(tc.token)
			if err == nil && code == tc.want {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if code != tc.want {
			t.Fatalf("%s: GET /metrics = %d (%v), want %d: %s", tc.who, code, err, tc.want, body)
		}
		if tc.want == http.StatusOK && len(body) == 0 {
			t.Errorf("%s: empty metrics", tc.who)
		}
		if tc.want != http.StatusOK && len(body) > 200 {
			t.Errorf("%s: a refusal with a body of %d bytes: %.200s", tc.who, len(body), body)
		}
	}
}
