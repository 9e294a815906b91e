package cachepool

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// observation is everything one pass learned; computeStatus turns it into
// the pool's status.
type observation struct {
	// Generation is the pool's metadata.generation.
	Generation int64
	// Readings of the pool's servers, sorted by node name.
	Readings []serverReading
	// DesiredScheduled is the DaemonSet's status.desiredNumberScheduled.
	DesiredScheduled int32
	// Rollout says why the DaemonSet is rolling out ("" when it is not).
	Rollout string
	// CephError says why the Ceph backend does not resolve ("" when it
	// does). It names objects and keys, never a key's value.
	CephError string
	// Volumes counts the CachedVolumes naming the pool.
	Volumes int32
	// Deleting: the pool is being deleted (held while Volumes > 0).
	Deleting bool
	// NotAllowed says why the operator's admission refused the pool's
	// devices or image ("" when it admitted them).
	NotAllowed string
	// Succeeded: every step of the pass worked, so ObservedGeneration may
	// advance.
	Succeeded bool
	// Now stamps condition transitions.
	Now time.Time
	// ServersUnknown: listing the servers failed, so Readings says nothing
	// (an empty list would make every volume see its server gone).
	ServersUnknown bool
}

// maxListed bounds how many servers a condition message names.
const maxListed = 3

// computeStatus is the pool's status from one pass's observation; old
// keeps condition transition times and ObservedGeneration when the pass
// failed.
func computeStatus(old *rcv1.CachePoolStatus, o *observation) rcv1.CachePoolStatus {
	st := rcv1.CachePoolStatus{
		Conditions:         slices.Clone(old.Conditions),
		ObservedGeneration: old.ObservedGeneration,
		Volumes:            o.Volumes,
	}
	if o.Succeeded {
		st.ObservedGeneration = o.Generation
	}
	var capacity, allocated int64
	var notReady []string
	for i := range o.Readings {
		s := serverStatus(&o.Readings[i])
		if s.Ready {
			st.ReadyServers++
		} else {
			notReady = append(notReady, fmt.Sprintf("%s: %s", s.NodeName, s.Message))
		}
		if o.Readings[i].Answered {
			capacity += o.Readings[i].CapacityBytes
			allocated += o.Readings[i].AllocatedBytes
		}
		st.Servers = append(st.Servers, s)
	}
	st.TotalServers = max(o.DesiredScheduled, int32(len(o.Readings)))
	if len(o.Readings) > 0 {
		st.Capacity = resource.NewQuantity(capacity, resource.BinarySI)
		st.Allocated = resource.NewQuantity(allocated, resource.BinarySI)
	}
	if missing := int(st.TotalServers) - len(o.Readings); missing > 0 {
		notReady = append(notReady, fmt.Sprintf("%d scheduled server(s) have no dataplane pod yet", missing))
	}
	if o.ServersUnknown {
		// Keep the last known servers and the conditions drawn from them
		// until the servers can be listed again.
		st.Servers = slices.Clone(old.Servers)
		st.ReadyServers, st.TotalServers = old.ReadyServers, old.TotalServers
		st.Capacity, st.Allocated = old.Capacity, old.Allocated
		return st
	}
	setReadyCondition(&st, o, notReady)
	setDegradedCondition(&st, o, notReady)
	setProgressingCondition(&st, o)
	return st
}

// serverStatus is one server's entry in the pool's status.
func serverStatus(r *serverReading) rcv1.ServerStatus {
	s := rcv1.ServerStatus{
		NodeName:    r.Server.NodeName,
		Rack:        r.Server.Rack,
		Address:     r.Server.Address,
		DataAddress: r.DataAddress,
		Version:     r.Version,
		Volumes:     r.Volumes,
		IOPS:        r.IOPS,
	}
	if r.Answered {
		s.Capacity = resource.NewQuantity(r.CapacityBytes, resource.BinarySI)
		s.Allocated = resource.NewQuantity(r.AllocatedBytes, resource.BinarySI)
		s.Devices = r.Devices
	}
	var why []string
	if !r.Server.PodReady {
		why = append(why, "dataplane pod "+r.Server.PodName+" is not ready")
	}
	if !r.Answered {
		why = append(why, r.Failure)
	}
	if len(r.MissingCacheBdevs) > 0 {
		why = append(why, "cache bdev(s) missing: "+strings.Join(r.MissingCacheBdevs, ", ")+" (the device could not be opened)")
	}
	if len(r.DeviceErrors) > 0 {
		why = append(why, "opening cache devices failed: "+strings.Join(r.DeviceErrors, "; "))
	}
	if len(r.DegradedVolumes) > 0 {
		why = append(why, "cached volume(s) degraded (cache device failed): "+strings.Join(r.DegradedVolumes, ", "))
	}
	s.Ready = len(why) == 0
	s.Message = strings.Join(why, "; ")
	// Kept failed calls do not make the server unready: it serves all
	// else, and a volume whose call failed reports it on its own.
	s.ConfigErrors = r.ConfigErrors
	if len(s.ConfigErrors) > maxConfigErrors {
		s.ConfigErrors = append(s.ConfigErrors[:maxConfigErrors-1],
			fmt.Sprintf("... and %d more (rackcache_get_config_errors)", len(r.ConfigErrors)-maxConfigErrors+1))
	}
	return s
}

// maxConfigErrors is the API's bound on status.servers[].configErrors.
const maxConfigErrors = 16

func setReadyCondition(st *rcv1.CachePoolStatus, o *observation, notReady []string) {
	c := metav1.Condition{Type: rcv1.ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case o.Deleting:
		c.Reason = rcv1.ReasonDeleting
		c.Message = fmt.Sprintf("deletion waits for %d CachedVolume(s) using the pool to be deleted", o.Volumes)
	case o.NotAllowed != "":
		c.Reason = rcv1.ReasonNotAllowed
		c.Message = "not applied: " + o.NotAllowed
	case o.CephError != "":
		c.Reason = rcv1.ReasonCephUnavailable
		c.Message = "Ceph backend: " + o.CephError
	case st.TotalServers == 0:
		c.Reason = rcv1.ReasonNoServers
		c.Message = "no cache server runs: no node matches the node selector, or the dataplane pods are not scheduled yet"
	case st.ReadyServers == 0:
		c.Reason = rcv1.ReasonServersNotReady
		c.Message = fmt.Sprintf("none of %d server(s) is ready: %s", st.TotalServers, listed(notReady))
	default:
		c.Status = metav1.ConditionTrue
		c.Reason = rcv1.ReasonAsExpected
		c.Message = fmt.Sprintf("%d of %d server(s) ready", st.ReadyServers, st.TotalServers)
	}
	setCondition(st, o, c)
}

func setDegradedCondition(st *rcv1.CachePoolStatus, o *observation, notReady []string) {
	c := metav1.Condition{Type: rcv1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: rcv1.ReasonAsExpected}
	if st.ReadyServers > 0 && len(notReady) > 0 {
		c.Status = metav1.ConditionTrue
		c.Reason = rcv1.ReasonServersNotReady
		c.Message = fmt.Sprintf("%d of %d server(s) not ready: %s", st.TotalServers-st.ReadyServers, st.TotalServers, listed(notReady))
	}
	setCondition(st, o, c)
}

func setProgressingCondition(st *rcv1.CachePoolStatus, o *observation) {
	c := metav1.Condition{Type: rcv1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: rcv1.ReasonAsExpected}
	if o.Rollout != "" {
		c.Status = metav1.ConditionTrue
		c.Reason = rcv1.ReasonRollingOut
		c.Message = o.Rollout
	}
	setCondition(st, o, c)
}

func setCondition(st *rcv1.CachePoolStatus, o *observation, c metav1.Condition) {
	c.ObservedGeneration = o.Generation
	c.LastTransitionTime = metav1.NewTime(o.Now)
	meta.SetStatusCondition(&st.Conditions, c)
}

func listed(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:maxListed], "; ") + fmt.Sprintf("; and %d more", len(items)-maxListed)
}

// rolloutMessage says why ds is still rolling out, "" when it is done. A
// DaemonSet not created yet is rolling out too.
func rolloutMessage(ds *appsv1.DaemonSet) string {
	switch {
	case ds == nil:
		return "the dataplane DaemonSet is being created"
	case ds.Status.ObservedGeneration < ds.Generation:
		return fmt.Sprintf("the DaemonSet controller has not yet seen generation %d of the dataplane DaemonSet", ds.Generation)
	case ds.Status.UpdatedNumberScheduled < ds.Status.DesiredNumberScheduled:
		return fmt.Sprintf("%d of %d server(s) run the current pod template", ds.Status.UpdatedNumberScheduled, ds.Status.DesiredNumberScheduled)
	}
	return ""
}
