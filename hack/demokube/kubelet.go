package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubelet runs the DaemonSet pods of one Node as local processes.
type kubelet struct {
	c         client.Client
	api       *rest.Config
	node      string
	address   string
	labels    map[string]string
	dir       string
	dataplane string
	// pods by DaemonSet (namespace/name).
	pods map[string]*localPod
}

// labelFlags collects repeated --label key=value flags.
type labelFlags map[string]string

func (l labelFlags) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labelFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("--label wants key=value, got %q", v)
	}
	l[k] = val
	return nil
}

func runKubelet(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kubelet", flag.ExitOnError)
	k := &kubelet{labels: labelFlags{}, pods: map[string]*localPod{}}
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the apiserver")
	fs.StringVar(&k.node, "node", "", "the Node's name")
	fs.StringVar(&k.address, "address", "127.0.0.1", "the Node's address, which host-network pods share")
	fs.StringVar(&k.dir, "dir", "", "where the pods' volumes and logs go")
	fs.StringVar(&k.dataplane, "dataplane", "", "the rackcache-dataplane binary that stands in for the pods' image")
	fs.Var(labelFlags(k.labels), "label", "a label of the Node, key=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || k.node == "" || k.dir == "" || k.dataplane == "" {
		return errors.New("kubelet needs --kubeconfig, --node, --dir and --dataplane")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("read kubeconfig: %w", err)
	}
	k.api = cfg
	if k.c, err = client.New(cfg, client.Options{Scheme: scheme.Scheme}); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := k.registerNode(ctx); err != nil {
		return err
	}
	defer k.stopAll()
	// Polling is plenty for a demo's one node and a few DaemonSets.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := k.sync(ctx); err != nil && ctx.Err() == nil {
			ctrl.Log.Error(err, "sync DaemonSets", "node", k.node)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// registerNode creates (or relabels) the Node and reports it Ready at its
// address, as a kubelet does at start.
func (k *kubelet) registerNode(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.node}}
	if _, err := ctrl.CreateOrUpdate(ctx, k.c, node, func() error {
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		for key, v := range k.labels {
			node.Labels[key] = v
		}
		node.Labels[corev1.LabelHostname] = k.node
		return nil
	}); err != nil {
		return fmt.Errorf("register Node %s: %w", k.node, err)
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "demokube stands in for the kubelet", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: k.address},
		{Type: corev1.NodeHostName, Address: k.node},
	}
	if err := k.c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("report Node %s Ready: %w", k.node, err)
	}
	ctrl.Log.Info("node registered", "node", k.node, "address", k.address, "labels", node.Labels)
	return nil
}

// sync starts the pods of the DaemonSets that select this node, replaces
// those whose template changed, and stops those whose DaemonSet is gone.
func (k *kubelet) sync(ctx context.Context) error {
	var list appsv1.DaemonSetList
	if err := k.c.List(ctx, &list); err != nil {
		return fmt.Errorf("list DaemonSets: %w", err)
	}
	wanted := map[string]bool{}
	for i := range list.Items {
		ds := &list.Items[i]
		if ds.DeletionTimestamp != nil || !labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector).Matches(labels.Set(k.labels)) {
			continue
		}
		key := ds.Namespace + "/" + ds.Name
		wanted[key] = true
		hash, err := templateHash(&ds.Spec.Template)
		if err != nil {
			return err
		}
		if p := k.pods[key]; p != nil {
			if p.hash == hash {
				continue
			}
			// A changed template rolls the pod, as the DaemonSet controller does.
			ctrl.Log.Info("pod template changed, replacing the pod", "daemonSet", key)
			k.stop(ctx, key)
		}
		p, err := k.createPod(ctx, ds, hash)
		if err != nil {
			return err
		}
		k.pods[key] = p
		go p.run()
	}
	for key := range k.pods {
		if !wanted[key] {
			k.stop(ctx, key)
		}
	}
	return nil
}

// createPod makes the Pod object the DaemonSet controller would make for
// this node (a leftover from an earlier run is replaced).
func (k *kubelet) createPod(ctx context.Context, ds *appsv1.DaemonSet, hash string) (*localPod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            ds.Name + "-" + k.node,
			Namespace:       ds.Namespace,
			Labels:          ds.Spec.Template.Labels,
			Annotations:     ds.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))},
		},
		Spec: *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = k.node
	if err := k.c.Delete(ctx, pod.DeepCopy(), client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("delete leftover pod %s: %w", pod.Name, err)
	}
	if err := wait(ctx, func() bool { return apierrors.IsNotFound(k.c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})) }); err != nil {
		return nil, err
	}
	if err := k.c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	ctrl.Log.Info("pod created", "pod", pod.Namespace+"/"+pod.Name, "daemonSet", ds.Name)
	pctx, cancel := context.WithCancel(ctx)
	return &localPod{k: k, pod: pod, hash: hash, ctx: pctx, cancel: cancel, done: make(chan struct{})}, nil
}

// stop ends a pod's process and deletes its Pod object.
func (k *kubelet) stop(ctx context.Context, key string) {
	p := k.pods[key]
	delete(k.pods, key)
	p.cancel()
	<-p.done
	if err := k.c.Delete(ctx, p.pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		ctrl.Log.Error(err, "delete pod", "pod", p.pod.Name)
	}
}

// stopAll ends every pod's process when the kubelet stops.
func (k *kubelet) stopAll() {
	for _, p := range k.pods {
		p.cancel()
		<-p.done
	}
}

func templateHash(t *corev1.PodTemplateSpec) (string, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("hash pod template: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8]), nil
}

// wait polls cond every 100 ms until it holds or ctx ends.
func wait(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
