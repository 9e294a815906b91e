package csi

import (
	"context"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// flushVolume has the operator write the volume's dirty cache data to
// Ceph and waits until it did: after it returns, every write acknowledged
// before the call is in the RBD image, so a snapshot or clone taken next
// holds it. Only write-back volumes hold dirty data. Every call asks anew
// (a retried CreateSnapshot must not take an earlier attempt's flush for
// its own): the token is purpose plus the time of the call.
func (d *Driver) flushVolume(ctx context.Context, cv *rcv1.CachedVolume, purpose string) error {
	token := purpose + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if cv.Status.WriteMode != "" && cv.Status.WriteMode != rcv1.WriteBack && cv.Spec.WriteMode != rcv1.WriteBack {
		return nil
	}
	_, err := d.updateVolume(ctx, cv.Name, func(cv *rcv1.CachedVolume) (bool, error) {
		if cv.Annotations[rcv1.FlushRequestAnnotation] == token {
			return false, nil
		}
		if cv.Annotations == nil {
			cv.Annotations = map[string]string{}
		}
		cv.Annotations[rcv1.FlushRequestAnnotation] = token
		return true, nil
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.ctrl.VolumeReadyTimeout)
	defer cancel()
	var last rcv1.CachedVolume
	err = wait.PollUntilContextCancel(ctx, d.ctrl.PollInterval, true, func(ctx context.Context) (bool, error) {
		if err := d.ctrl.Client.Get(ctx, client.ObjectKey{Name: cv.Name}, &last); err != nil {
			return false, nil
		}
		// Another flush asked after this one (a second snapshot of the
		// volume) replaces its token; its answer covers this request too.
		done := last.Status.FlushedRequest
		return done != "" && (done == token || done == last.Annotations[rcv1.FlushRequestAnnotation]), nil
	})
	if err != nil {
		msg := "no flush status yet"
		if f := last.Status.Flush; f != nil {
			msg = "dirty bytes left " + strconv.FormatInt(f.DirtyBytes, 10)
			if f.Error != "" {
				msg += ", last error: " + f.Error
			}
		}
		return errorf(context.DeadlineExceeded, "CachedVolume %s has not flushed its cache to Ceph yet (%s)", cv.Name, msg)
	}
	return nil
}
