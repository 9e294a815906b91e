package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Cluster is the cluster under test: a client for its API objects and the
// helm and kubectl binaries of bin/ (hack/deps.sh go-tools builds them).
type Cluster struct {
	Config *Config
	Client client.Client
}

// NewCluster connects to the cluster of cfg.Kubeconfig.
func NewCluster(cfg *Config) (*Cluster, error) {
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", cfg.Kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(rcv1.AddToScheme(scheme))
	c, err := client.New(rest, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Kubeconfig, err)
	}
	return &Cluster{Config: cfg, Client: c}, nil
}

// Kubectl runs bin/kubectl against the cluster and returns its stdout; the
// error carries stderr.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	return c.run(ctx, nil, "kubectl", args...)
}

// KubectlInput is Kubectl with stdin: for what must not show in the
// command line (and so in an error), such as a token.
func (c *Cluster) KubectlInput(ctx context.Context, stdin string, args ...string) (string, error) {
	return c.run(ctx, strings.NewReader(stdin), "kubectl", args...)
}

// KubectlApply applies a manifest given as text.
func (c *Cluster) KubectlApply(ctx context.Context, manifest string) error {
	_, err := c.run(ctx, strings.NewReader(manifest), "kubectl", "apply", "-f", "-")
	return err
}

// Helm runs bin/helm against the cluster.
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	return c.run(ctx, nil, "helm", args...)
}

// Exec runs a shell script in a pod's first container (kubectl exec).
func (c *Cluster) Exec(ctx context.Context, namespace, pod, script string) (string, error) {
	return c.Kubectl(ctx, "exec", "-n", namespace, pod, "--", "sh", "-c", script)
}

func (c *Cluster) run(ctx context.Context, stdin *strings.Reader, tool string, args ...string) (string, error) {
	bin := filepath.Join(c.Config.RepoRoot, "bin", tool)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s not found in bin/ (run hack/deps.sh go-tools): %w", tool, err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Config.Kubeconfig)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// PodLogs returns a pod's logs (all containers), for failure reports.
func (c *Cluster) PodLogs(ctx context.Context, namespace, pod string) string {
	out, err := c.Kubectl(ctx, "logs", "-n", namespace, pod, "--all-containers", "--tail=50")
	if err != nil {
		return err.Error()
	}
	return out
}

// PodPhase reads a pod's phase and, when it is not running, why.
func (c *Cluster) PodPhase(ctx context.Context, namespace, name string) (corev1.PodPhase, string, error) {
	var pod corev1.Pod
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pod); err != nil {
		return "", "", err
	}
	var why []string
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			why = append(why, fmt.Sprintf("%s: %s %s", cs.Name, w.Reason, w.Message))
		}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			why = append(why, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	return pod.Status.Phase, strings.Join(why, "; "), nil
}
