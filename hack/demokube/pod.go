package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// restartDelay is how long an exited container waits before it runs again
// (a kubelet backs off from 10 s; the demo wants its restart seen at once).
const restartDelay = time.Second

// localPod is one DaemonSet pod run as a local process.
type localPod struct {
	k      *kubelet
	pod    *corev1.Pod
	hash   string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// dir is where the pod's volumes, log and pid file live.
func (p *localPod) dir() string { return filepath.Join(p.k.dir, p.pod.Name) }

// run runs the pod's one container until the pod is stopped, restarting it
// whenever it exits (restartPolicy Always), and keeps the pod's status.
func (p *localPod) run() {
	defer close(p.done)
	log := ctrl.Log.WithValues("pod", p.pod.Namespace+"/"+p.pod.Name)
	if len(p.pod.Spec.Containers) != 1 {
		log.Error(nil, "only pods with one container are run", "containers", len(p.pod.Spec.Containers))
		return
	}
	restarts := int32(0)
	for p.ctx.Err() == nil {
		cmd, err := p.prepare()
		if err != nil {
			// The pod's Secrets or ConfigMap may not exist yet.
			log.Info("container not startable yet", "reason", err.Error())
			sleep(p.ctx, restartDelay)
			continue
		}
		if err := cmd.Start(); err != nil {
			log.Error(err, "start container")
			sleep(p.ctx, restartDelay)
			continue
		}
		pid := cmd.Process.Pid
		_ = os.WriteFile(filepath.Join(p.dir(), "pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644)
		log.Info("container started", "pid", pid, "restarts", restarts)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		p.probe(exited, restarts)
		select {
		case err := <-exited:
			log.Info("container exited", "pid", pid, "status", fmt.Sprint(err))
		default:
			// The pod is stopping: SIGTERM, then SIGKILL after the grace period.
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			select {
			case err = <-exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				err = <-exited
			}
			log.Info("container stopped", "pid", pid, "status", fmt.Sprint(err))
		}
		_ = os.Remove(filepath.Join(p.dir(), "pid"))
		p.setStatus(false, restarts, nil)
		restarts++
		sleep(p.ctx, restartDelay)
	}
}

// probe reports the pod Ready while its readiness probe answers, until the
// process exits (its error is put back) or the pod stops.
func (p *localPod) probe(exited chan error, restarts int32) {
	started := metav1.Now()
	ready, reported := false, false
	for {
		now := p.ready()
		if now != ready || !reported {
			ready, reported = now, true
			p.setStatus(ready, restarts, &started)
		}
		select {
		case err := <-exited:
			exited <- err
			return
		case <-p.ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ready runs the container's HTTP readiness probe once (no probe: ready).
func (p *localPod) ready() bool {
	c := p.pod.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		return true
	}
	get := c.ReadinessProbe.HTTPGet
	port := get.Port.IntValue()
	for _, cp := range c.Ports {
		if cp.Name == get.Port.StrVal && get.Port.StrVal != "" {
			port = int(cp.ContainerPort)
		}
	}
	host := get.Host
	if host == "" {
		host = p.k.address
	}
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + net.JoinHostPort(host, strconv.Itoa(port)) + get.Path)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// setStatus writes the pod's status as a kubelet does: Running at the
// node's address (host network), Ready as the probe says.
func (p *localPod) setStatus(ready bool, restarts int32, started *metav1.Time) {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.Now()
	state := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	if started != nil {
		state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *started}}
	}
	c := p.pod.Spec.Containers[0]
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := &corev1.Pod{}
		if err := p.k.c.Get(p.ctx, client.ObjectKeyFromObject(p.pod), pod); err != nil {
			return err
		}
		pod.Status = corev1.PodStatus{
			Phase:     corev1.PodRunning,
			HostIP:    p.k.address,
			HostIPs:   []corev1.HostIP{{IP: p.k.address}},
			PodIP:     p.k.address,
			PodIPs:    []corev1.PodIP{{IP: p.k.address}},
			StartTime: &pod.CreationTimestamp,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: pod.CreationTimestamp},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: pod.CreationTimestamp},
				{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: c.Name, Image: c.Image, ImageID: "demokube://" + p.k.dataplane,
				Ready: ready, RestartCount: restarts, State: state, Started: &ready,
			}},
		}
		return p.k.c.Status().Update(p.ctx, pod)
	})
	if err != nil && p.ctx.Err() == nil {
		ctrl.Log.Error(err, "update pod status", "pod", p.pod.Name)
	}
	p.setDaemonSetStatus(ready)
}

// setDaemonSetStatus writes the DaemonSet's status as the DaemonSet
// controller would for this one node (there is no controller-manager).
func (p *localPod) setDaemonSetStatus(ready bool) {
	owner := metav1.GetControllerOf(p.pod)
	if owner == nil {
		return
	}
	readyCount := int32(0)
	if ready {
		readyCount = 1
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds := &appsv1.DaemonSet{}
		if err := p.k.c.Get(p.ctx, client.ObjectKey{Namespace: p.pod.Namespace, Name: owner.Name}, ds); err != nil {
			return err
		}
		ds.Status = appsv1.DaemonSetStatus{
			ObservedGeneration:     ds.Generation,
			DesiredNumberScheduled: 1,
			CurrentNumberScheduled: 1,
			UpdatedNumberScheduled: 1,
			NumberReady:            readyCount,
			NumberAvailable:        readyCount,
			NumberUnavailable:      1 - readyCount,
		}
		return p.k.c.Status().Update(p.ctx, ds)
	})
	if err != nil && p.ctx.Err() == nil {
		ctrl.Log.Error(err, "update DaemonSet status", "daemonSet", owner.Name)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
