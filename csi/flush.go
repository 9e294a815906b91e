package csi

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
)

// flushVolume has the operator write the volume's dirty cache data to
// Ceph and hold the volume write-through, and waits until both are done:
// after it returns, every write acknowledged before the call is in the RBD
// image, and every write acknowledged until release is called is in it
// when acknowledged, in order, so a snapshot or clone taken in between
// holds a prefix of the writes (crash-consistent). Only write-back volumes
// hold dirty data. Every call asks anew (a retried CreateSnapshot must not
// take an earlier attempt's flush for its own): the token is purpose plus
// the time of the call. release ends the hold (best effort: the hold also
// ends by itself at its deadline); it is never nil.
func (d *Driver) flushVolume(ctx context.Context, cv *rcv1.CachedVolume, purpose string) (release func(), err error) {
	token := purpose + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	release = func() {}
	if cv.Status.WriteMode != "" && cv.Status.WriteMode != rcv1.WriteBack && cv.Spec.WriteMode != rcv1.WriteBack {
		return release, nil
	}
	// Long enough for the flush and the snapshot; bounded so a driver that
	// dies before release leaves the volume write-back again.
	until := time.Now().Add(d.ctrl.VolumeReadyTimeout + holdMargin)
	_, err = d.updateVolume(ctx, cv.Name, func(cv *rcv1.CachedVolume) (bool, error) {
		if cv.Annotations[rcv1.FlushRequestAnnotation] == token {
			return false, nil
		}
		if cv.Annotations == nil {
			cv.Annotations = map[string]string{}
		}
		cv.Annotations[rcv1.FlushRequestAnnotation] = token
		cv.Annotations[rcv1.WriteThroughHoldAnnotation] = cachedvolume.HoldValue(token, until)
		return true, nil
	})
	if err != nil {
		return release, err
	}
	release = func() { d.releaseHold(ctx, cv.Name, token) }
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
		release()
		return func() {}, errorf(context.DeadlineExceeded, "CachedVolume %s has not flushed its cache to Ceph yet (%s)", cv.Name, msg)
	}
	return release, nil
}

// holdMargin is how long a write-through hold outlives the flush's wait:
// the time to take the RBD snapshot or clone.
const holdMargin = 2 * time.Minute

// releaseHold removes the volume's write-through hold if it is still
// token's (a later snapshot's hold is left to its owner). It runs after
// the snapshot, also when the call's context is done.
func (d *Driver) releaseHold(parent context.Context, name, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 30*time.Second)
	defer cancel()
	_, err := d.updateVolume(ctx, name, func(cv *rcv1.CachedVolume) (bool, error) {
		v := cv.Annotations[rcv1.WriteThroughHoldAnnotation]
		if !strings.HasPrefix(v, token+"@") {
			return false, nil
		}
		delete(cv.Annotations, rcv1.WriteThroughHoldAnnotation)
		return true, nil
	})
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "end the write-through hold (it ends by itself at its deadline)", "volume", name)
	}
}
