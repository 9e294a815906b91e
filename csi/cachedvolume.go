package csi

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
)

// Labels and annotations the driver puts on the CachedVolumes it creates.
const (
	// managedByLabel marks CSI volumes (ListVolumes lists only those).
	managedByLabel = "app.kubernetes.io/managed-by"
	// nameAnnotation keeps the CSI request name the volume was made for.
	nameAnnotation = "csi.rackcache.io/name"
	// pvcAnnotation and pvcNamespaceAnnotation keep the claim's name
	// (external-provisioner --extra-create-metadata).
	pvcAnnotation          = "csi.rackcache.io/pvc"
	pvcNamespaceAnnotation = "csi.rackcache.io/pvc-namespace"
	// The parameters external-provisioner adds with --extra-create-metadata.
	pvcNameParam      = "csi.storage.k8s.io/pvc/name"
	pvcNamespaceParam = "csi.storage.k8s.io/pvc/namespace"
)

// getVolume reads the CachedVolume of id; a missing one is ErrNotFound.
func (d *Driver) getVolume(ctx context.Context, id volumeID) (*rcv1.CachedVolume, error) {
	var cv rcv1.CachedVolume
	if err := d.ctrl.Client.Get(ctx, client.ObjectKey{Name: id.Image()}, &cv); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errorf(ErrNotFound, "volume %s (CachedVolume %s) does not exist", id, id.Image())
		}
		return nil, errorf(ErrUnavailable, "read CachedVolume %s: %v", id.Image(), err)
	}
	if cv.Spec.PoolName != id.CachePool || cv.Spec.RBD.Pool != id.RBDPool {
		return nil, errorf(ErrNotFound, "volume %s: CachedVolume %s serves pool %s, image %s/%s", id, cv.Name, cv.Spec.PoolName, cv.Spec.RBD.Pool, cv.Spec.RBD.Image)
	}
	return &cv, nil
}

// applied reports whether the operator has applied the volume's current
// spec on its server and serves it.
func applied(cv *rcv1.CachedVolume) bool {
	return cv.Status.ObservedGeneration >= cv.Generation && cv.Status.Phase == rcv1.VolumeReady &&
		cv.Status.Address != "" && cv.Status.Port != 0 && cv.Status.NQN != ""
}

// waitApplied polls the CachedVolume until the operator has applied its
// current spec and serves it. A volume that cannot be placed for lack of
// capacity is ResourceExhausted; the wait's end is DeadlineExceeded, with
// the volume's last condition in the message.
func (d *Driver) waitApplied(ctx context.Context, name string) (*rcv1.CachedVolume, error) {
	ctx, cancel := context.WithTimeout(ctx, d.ctrl.VolumeReadyTimeout)
	defer cancel()
	var last rcv1.CachedVolume
	err := wait.PollUntilContextCancel(ctx, d.ctrl.PollInterval, true, func(ctx context.Context) (bool, error) {
		if err := d.ctrl.Client.Get(ctx, client.ObjectKey{Name: name}, &last); err != nil {
			if apierrors.IsNotFound(err) {
				return false, errorf(ErrNotFound, "CachedVolume %s is gone", name)
			}
			return false, nil // the apiserver may be back in a moment
		}
		if c := meta.FindStatusCondition(last.Status.Conditions, rcv1.ConditionPlaced); c != nil && c.Reason == rcv1.ReasonNoCapacity {
			return false, errorf(ErrResourceExhausted, "CachedVolume %s: %s", name, c.Message)
		}
		return applied(&last), nil
	})
	if err == nil {
		return &last, nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return nil, errorf(context.DeadlineExceeded, "CachedVolume %s is not served yet (phase %q): %s", name, last.Status.Phase, readyMessage(&last))
	}
	return nil, err
}

// waitGone polls until the CachedVolume no longer exists (its finalizer
// flushed and tore it down).
func (d *Driver) waitGone(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, d.ctrl.VolumeReadyTimeout)
	defer cancel()
	var last rcv1.CachedVolume
	err := wait.PollUntilContextCancel(ctx, d.ctrl.PollInterval, true, func(ctx context.Context) (bool, error) {
		err := d.ctrl.Client.Get(ctx, client.ObjectKey{Name: name}, &last)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return errorf(context.DeadlineExceeded, "CachedVolume %s is still being deleted (phase %q): %s", name, last.Status.Phase, readyMessage(&last))
	}
	return nil
}

// readyMessage is the Ready condition's message, for errors.
func readyMessage(cv *rcv1.CachedVolume) string {
	if c := meta.FindStatusCondition(cv.Status.Conditions, rcv1.ConditionReady); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "no Ready condition yet"
}

// updateVolume applies change to the newest CachedVolume and writes it,
// retrying on conflicts. change returns false when nothing needs writing.
func (d *Driver) updateVolume(ctx context.Context, name string, change func(*rcv1.CachedVolume) (bool, error)) (*rcv1.CachedVolume, error) {
	for attempt := 0; ; attempt++ {
		var cv rcv1.CachedVolume
		if err := d.ctrl.Client.Get(ctx, client.ObjectKey{Name: name}, &cv); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, errorf(ErrNotFound, "CachedVolume %s does not exist", name)
			}
			return nil, errorf(ErrUnavailable, "read CachedVolume %s: %v", name, err)
		}
		write, err := change(&cv)
		if err != nil || !write {
			return &cv, err
		}
		err = d.ctrl.Client.Update(ctx, &cv)
		if err == nil {
			return &cv, nil
		}
		if !apierrors.IsConflict(err) || attempt == 5 {
			return nil, errorf(ErrUnavailable, "update CachedVolume %s: %v", name, err)
		}
		time.Sleep(d.ctrl.PollInterval)
	}
}

// volumeContext is what NodeStage needs to attach the volume.
func volumeContext(cv *rcv1.CachedVolume, connect map[string]string) map[string]string {
	vc := map[string]string{
		ctxAddress:   cv.Status.Address,
		ctxPort:      strconv.Itoa(int(cv.Status.Port)),
		ctxSubNQN:    cv.Status.NQN,
		ctxNSUUID:    cachedvolume.NamespaceUUID(string(cv.UID)),
		ctxCachePool: cv.Spec.PoolName,
	}
	for k, v := range connect {
		vc[k] = v
	}
	return vc
}

// volumeOf is the CSI volume a served CachedVolume is.
func (d *Driver) volumeOf(id volumeID, cv *rcv1.CachedVolume, connect map[string]string, src *csi.VolumeContentSource) *csi.Volume {
	v := &csi.Volume{
		VolumeId:      id.String(),
		CapacityBytes: cv.Spec.Size.Value(),
		VolumeContext: volumeContext(cv, connect),
		ContentSource: src,
	}
	if cv.Status.Rack != "" {
		v.AccessibleTopology = []*csi.Topology{{Segments: map[string]string{d.rackLabel: cv.Status.Rack}}}
	}
	return v
}
