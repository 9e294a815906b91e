package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rackcache/rackcache/controllers/servers"
)

// CreateServiceAccounts creates in namespace what config/rbac installs
// for the dataplane's RPC authentication: the operator's ServiceAccount
// (the operator mints the servers' tokens for it) and the dataplane's,
// bound to system:auth-delegator so a server can create TokenReviews.
// Objects that exist already are kept.
func CreateServiceAccounts(ctx context.Context, c client.Client, namespace string) error {
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: servers.OperatorServiceAccount}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: servers.DataplaneServiceAccount}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "rackcache-dataplane-token-review-" + namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: servers.DataplaneServiceAccount}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// ServerReviewArgs are the flags of a dataplane standing in for pool's
// server on node, as the operator's DaemonSet configures it: callers'
// tokens reviewed for that server's audience, the operator's
// ServiceAccount the one caller let in. The files a kubelet would mount
// (the dataplane ServiceAccount's token, the API server's CA) are written
// into dir. CreateServiceAccounts must have run.
func ServerReviewArgs(ctx context.Context, c client.Client, cfg *rest.Config, namespace, pool, node, dir string) ([]string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: servers.DataplaneServiceAccount}}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
		return nil, fmt.Errorf("request a token of the dataplane's ServiceAccount: %w", err)
	}
	tokenFile, caFile := filepath.Join(dir, "kube-token"), filepath.Join(dir, "kube-ca.crt")
	if err := os.WriteFile(tokenFile, []byte(req.Status.Token), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(caFile, cfg.CAData, 0o600); err != nil {
		return nil, err
	}
	api := cfg.Host
	if !strings.HasPrefix(api, "https://") {
		api = "https://" + api
	}
	return []string{
		"--rpc-token-audience", servers.RPCAudience(namespace, pool, node),
		"--rpc-allowed-caller", servers.ServiceAccountUser(namespace, servers.OperatorServiceAccount),
		"--kube-api", api, "--kube-ca-file", caFile, "--kube-token-file", tokenFile,
	}, nil
}

// MustServerReviewArgs is ServerReviewArgs for a test that cannot go on
// without it.
func MustServerReviewArgs(t testing.TB, c client.Client, cfg *rest.Config, namespace, pool, node string) []string {
	t.Helper()
	args, err := ServerReviewArgs(context.Background(), c, cfg, namespace, pool, node, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return args
}
