package cachedvolume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/hostkeys"
)

// A write-back volume's mirror holds every acknowledged write: the owner's
// dataplane forwards its writes to the mirror's copy of the volume (created
// with role mirror, so it never writes back on its own) and answers the
// host once both servers have them (docs/dataplane.md, "Mirrored
// write-back"). The operator's part:
//
//   - the mirror exports its copy on a replication subsystem
//     (ReplicaNQN) to the owner's server host NQN only, which logs in with
//     DH-HMAC-CHAP keys kept in the volume's replication Secret;
//   - the owner is connected to it (bdev_adacache_set_mirror) only while
//     the mirror's copy is empty: a copy that missed writes (a mirror that
//     restarted, a connection that broke) is made anew first, and the
//     owner writes back what it had dirty before (state syncing);
//   - Mirrored turns True only once the owner reports the mirror in sync,
//     so only then may the mirror be promoted;
//   - an owner whose mirror connection broke holds the answers of the
//     writes it could not mirror. It is told to drop the mirror (which
//     answers them) only on a pass that finds Mirrored False already
//     stored: otherwise a failed status write could leave a stored
//     Mirrored True for a mirror that misses acknowledged writes;
//   - every pass confirms each server's role and the volume's epoch: a
//     server that restarted writes nothing back until then, and one that
//     was replaced meanwhile is never confirmed (former.go deletes its
//     copy).

// replicaKeyPrefix starts the keyring names of vol's replication keys. A
// colon ends the volume's name (no Kubernetes name holds one), so one
// volume's prefix never matches another's keys.
func replicaKeyPrefix(vol string) string { return "replica:" + vol + ":" }

// ReplicationSecretName is the Secret (in the operator's namespace) holding
// the DH-HMAC-CHAP keys of vol's replication channel.
func ReplicationSecretName(vol string) string { return vol + "-replication-keys" }

// LabelReplicationKeysOf labels a replication keys Secret with its volume.
const LabelReplicationKeysOf = "rackcache.io/replication-keys-of"

// Fields of the replication keys Secret: the owner's (host) secret and the
// mirror's (controller) secret; both sides authenticate.
const (
	replicationHostKey = "host"
	replicationCtrlKey = "ctrl"
)

// ensureReplicationKeys returns the keys of vol's replication channel,
// creating its Secret on first use.
func (r *Reconciler) ensureReplicationKeys(ctx context.Context, vol *rcv1.CachedVolume) (HostKeys, error) {
	key := client.ObjectKey{Namespace: r.Namespace, Name: ReplicationSecretName(vol.Name)}
	sec := &corev1.Secret{}
	err := r.apiReader().Get(ctx, key, sec)
	switch {
	case apierrors.IsNotFound(err):
		host, err := hostkeys.NewSecret()
		if err != nil {
			return HostKeys{}, fmt.Errorf("generate the replication keys of %s: %w", vol.Name, err)
		}
		ctrlKey, err := hostkeys.NewSecret()
		if err != nil {
			return HostKeys{}, fmt.Errorf("generate the replication keys of %s: %w", vol.Name, err)
		}
		sec = newHostKeysSecret(vol, key)
		sec.Labels = map[string]string{LabelReplicationKeysOf: vol.Name, "app.kubernetes.io/managed-by": "rackcache-operator"}
		sec.Data = map[string][]byte{replicationHostKey: []byte(host), replicationCtrlKey: []byte(ctrlKey)}
		if err := r.Client.Create(ctx, sec); err != nil {
			return HostKeys{}, fmt.Errorf("create the replication keys Secret %s: %w", key, err)
		}
	case err != nil:
		return HostKeys{}, fmt.Errorf("read the replication keys Secret %s: %w", key, err)
	case sec.Labels[LabelReplicationKeysOf] != vol.Name:
		return HostKeys{}, fmt.Errorf("secret %s exists and is not this volume's replication keys (no label %s=%s): rename or remove it", key, LabelReplicationKeysOf, vol.Name)
	}
	host, ctrlKey := string(sec.Data[replicationHostKey]), string(sec.Data[replicationCtrlKey])
	if hostkeys.CheckSecret(host) != nil || hostkeys.CheckSecret(ctrlKey) != nil {
		return HostKeys{}, fmt.Errorf("secret %s: %q and %q must be DH-HMAC-CHAP secrets (DHHC-1:...); delete the Secret to have new ones made", key, replicationHostKey, replicationCtrlKey)
	}
	return HostKeys{
		Names: dataplane.HostKeyNames{Host: replicaKeyName(vol.Name, "host", host), Ctrlr: replicaKeyName(vol.Name, "ctrl", ctrlKey)},
		Host:  dataplane.Secret(host), Ctrl: dataplane.Secret(ctrlKey),
	}, nil
}

// replicaKeyName names a replication key in the keyring: a digest of the
// secret tells a Secret made anew from the old one.
func replicaKeyName(vol, role, secret string) string {
	sum := sha256.Sum256([]byte("rackcache key name\x00" + secret))
	return replicaKeyPrefix(vol) + role + "." + hex.EncodeToString(sum[:4])
}

// ensureReplication makes the server hold the replication keys d names
// and, on a mirror (d.ReplicaHost set), export the cached bdev on the
// replication subsystem to the owner's host only; elsewhere the subsystem
// is removed, which also ends a former owner's connection to a promoted
// mirror before that mirror turns owner.
func ensureReplication(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	keyring, err := keyringNames(ctx, c, replicaKeyPrefix(d.Volume))
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	if d.ReplicaKeys != nil {
		keep[d.ReplicaKeys.Names.Host], keep[d.ReplicaKeys.Names.Ctrlr] = true, true
		if err := ensureKeys(ctx, c, keyring, *d.ReplicaKeys); err != nil {
			return err
		}
	}
	nqn := ReplicaNQN(d.Volume)
	sub, err := lookupSubsystem(ctx, c, nqn)
	if err != nil {
		return err
	}
	switch {
	case d.ReplicaHost == "" && sub != nil:
		if err := c.DeleteSubsystem(ctx, nqn); err != nil && !dataplane.IsNotFound(err) {
			return fmt.Errorf("delete replication subsystem %s: %w", nqn, err)
		}
		res.Changed = append(res.Changed, "removed replication subsystem")
	case d.ReplicaHost != "":
		rd := d
		rd.Subsystem = dataplane.SubsystemParams{NQN: nqn, SerialNumber: d.Subsystem.SerialNumber, ModelNumber: ModelNumber, MaxNamespaces: 1}
		rd.Namespace = dataplane.Namespace{NSID: 1, BdevName: d.Cached.Name, UUID: d.Namespace.UUID}
		rd.Listener.SecureChannel = false
		rd.ANAState = ""
		rd.Hosts = []string{d.ReplicaHost}
		rd.HostKeys = map[string]HostKeys{d.ReplicaHost: *d.ReplicaKeys}
		if err := ensureReplicaSubsystem(ctx, c, rd, sub, res); err != nil {
			return err
		}
	}
	return dropKeys(ctx, c, keyring, keep)
}

// ensureReplicaSubsystem is ensureSubsystem for the replication subsystem:
// its hosts' keys are the replication keys (ensured by the caller).
func ensureReplicaSubsystem(ctx context.Context, c *dataplane.Client, d Desired, sub *dataplane.Subsystem, res *ApplyResult) error {
	nqn := d.Subsystem.NQN
	if sub == nil {
		createErr := c.CreateSubsystem(ctx, d.Subsystem)
		var err error
		if sub, err = lookupSubsystem(ctx, c, nqn); err != nil {
			return err
		}
		if sub == nil {
			return fmt.Errorf("create replication subsystem %s: %w", nqn, createErr)
		}
		res.Created = append(res.Created, "replication subsystem")
	}
	if err := ensureNamespace(ctx, c, d, sub, res); err != nil {
		return err
	}
	if err := ensureListener(ctx, c, d, sub, res); err != nil {
		return err
	}
	have := map[string]dataplane.HostKeyNames{}
	for _, h := range sub.Hosts {
		have[h.NQN] = h.HostKeyNames
	}
	want := d.HostKeys[d.ReplicaHost]
	for h, names := range have {
		switch {
		case h != d.ReplicaHost:
			if err := c.RemoveHost(ctx, nqn, h); err != nil {
				return fmt.Errorf("revoke host %s from replication subsystem %s: %w", h, nqn, err)
			}
			res.Changed = append(res.Changed, "replication host removed "+h)
		case names != want.Names:
			if err := c.SetHostKeys(ctx, nqn, h, want.Names); err != nil {
				return fmt.Errorf("set the keys of host %s on replication subsystem %s: %w", h, nqn, err)
			}
		}
	}
	if _, ok := have[d.ReplicaHost]; !ok {
		if err := c.AddHostWithKeys(ctx, nqn, d.ReplicaHost, want.Names); err != nil {
			return fmt.Errorf("allow host %s on replication subsystem %s: %w", d.ReplicaHost, nqn, err)
		}
		res.Changed = append(res.Changed, "replication host "+d.ReplicaHost)
	}
	return nil
}

// ensureRole confirms the cached bdev's role and the volume's epoch when
// d sets them: a server loaded with an epoch writes nothing back until
// then, and a mirror turns owner here (it starts writing back its dirty
// set). Runs after ensureReplication, so a promoted mirror has dropped
// the old owner's connection first.
func ensureRole(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	want := d.Cached
	if want.Role == "" || want.Epoch == nil {
		return nil
	}
	st, err := c.CachedBdevStats(ctx, want.Name)
	if err != nil {
		return fmt.Errorf("read the role of cached bdev %s: %w", want.Name, err)
	}
	if st.Role == want.Role && st.Epoch != nil && *st.Epoch == *want.Epoch && !st.Held {
		return nil
	}
	if err := c.SetCachedBdevRole(ctx, want.Name, want.Role, want.Epoch); err != nil {
		return fmt.Errorf("make cached bdev %s %s at epoch %d: %w", want.Name, want.Role, *want.Epoch, err)
	}
	res.Changed = append(res.Changed, fmt.Sprintf("role %s epoch %d", want.Role, *want.Epoch))
	return nil
}

// setWriteBackRoles gives d the role and epoch of a write-back mirror's
// pair (owner or mirror) and the replication keys; on the mirror the
// replication subsystem's only host is the owner.
func setWriteBackRoles(d *Desired, vol *rcv1.CachedVolume, role string, keys HostKeys) {
	epoch := uint64(vol.Status.Epoch)
	d.Cached.Role, d.Cached.Epoch = role, &epoch
	d.ReplicaKeys = &keys
	if role == dataplane.RoleMirror {
		d.ReplicaHost = ServerHostNQN(vol.Status.Server)
	}
}

// mirrorTarget is how the owner reaches the mirror's replication subsystem.
func mirrorTarget(vol *rcv1.CachedVolume, address string, port int32, keys HostKeys) dataplane.MirrorTarget {
	return dataplane.MirrorTarget{
		TrAddr: address, TrSvcID: strconv.Itoa(int(port)), SubNQN: ReplicaNQN(vol.Name),
		HostNQN: ServerHostNQN(vol.Status.Server), NSID: 1,
		DhchapKey: keys.Names.Host, DhchapCtrlrKey: keys.Names.Ctrlr,
	}
}

// describeTarget is how the owner's stats name t (replica.target).
func describeTarget(t dataplane.MirrorTarget) string {
	return t.SubNQN + "@" + net.JoinHostPort(t.TrAddr, t.TrSvcID)
}

// copyMadeAnew: Apply created, loaded or discarded the cached bdev.
func copyMadeAnew(res ApplyResult) bool {
	return res.Loaded || slices.ContainsFunc(res.Created, func(c string) bool { return strings.HasPrefix(c, "cached bdev") }) ||
		slices.ContainsFunc(res.Changed, func(c string) bool { return strings.HasPrefix(c, staleCacheDiscarded) })
}

// storedMirroredReason is the stored Mirrored condition's reason.
func storedMirroredReason(vol *rcv1.CachedVolume) string {
	if c := meta.FindStatusCondition(vol.Status.Conditions, rcv1.ConditionMirrored); c != nil {
		return c.Reason
	}
	return ""
}

// storedFresh: the volume this pass read is the one the apiserver holds.
// Checked before a step that relies on Mirrored False being stored (the
// cache may lag a pass that stored True): otherwise the pass stops.
func (r *Reconciler) storedFresh(ctx context.Context, s *scope) bool {
	fresh := &rcv1.CachedVolume{}
	if err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(s.vol), fresh); err != nil || fresh.ResourceVersion != s.vol.ResourceVersion {
		s.stale, s.requeueSoon = true, true
		return false
	}
	return true
}

// mirroredStored: the volume's stored status says Mirrored True.
func mirroredStored(vol *rcv1.CachedVolume) bool {
	return meta.IsStatusConditionTrue(vol.Status.Conditions, rcv1.ConditionMirrored)
}

// ownerForwards: the owner's cached bdev (its statistics) has a mirror connection (a broken
// one holds the answers of what it could not forward, so it counts), or
// it runs another mode than write-back (what it acknowledges is in Ceph:
// a snapshot's write-through hold, a switch away from write-back).
func ownerForwards(st *dataplane.CacheStats) bool {
	return st != nil && (st.Replica != nil || st.WriteMode != dataplane.WriteBack)
}

// ownerMirrorsWriteBack: the owner runs write-back with a mirror attached,
// so a change of mode now would leave the mirror's copy stale. One that
// already left write-back (a hold in force; a write-through owner's
// mirror copy gets no writes and stays empty) is not held back again.
func ownerMirrorsWriteBack(st *dataplane.CacheStats) bool {
	return st != nil && st.Replica != nil && st.WriteMode == dataplane.WriteBack
}

// releaseReplica tells the owner to stop forwarding to a mirror that is
// broken, another than the volume's, or no longer wanted (unless keep):
// the answers it held for unmirrored writes go out. Only once Mirrored
// False is stored (see the top of this file): until then it reports the
// mirror lost and the pass comes back soon. True when the owner has no
// mirror connection left to worry about.
func (r *Reconciler) releaseReplica(ctx context.Context, s *scope, keep string) bool {
	if s.ownerClient == nil {
		return false
	}
	name := CachedBdevName(s.vol.Name)
	// Read by recordApplied a moment ago, unless that read failed.
	st := s.ownerStats
	if st == nil {
		var err error
		if st, err = s.ownerClient.CachedBdevStats(ctx, name); err != nil {
			s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonDataplaneError, fmt.Sprintf("read the owner's mirror state: %v", err)}
			return false
		}
	}
	s.ownerReplica, s.ownerDirty = st.Replica, st.DirtyBytes
	rep := st.Replica
	// A mirror whose copy was made anew on the last pass: the owner may not
	// have noticed yet that its connection leads nowhere.
	replaced := storedMirroredReason(s.vol) == rcv1.ReasonMirrorReplaced
	if rep == nil || (rep.State != dataplane.ReplicaBroken && rep.Target == keep && !replaced) {
		return true
	}
	if mirroredStored(s.vol) {
		why := "the owner forwards to a mirror the volume no longer has"
		if rep.State == dataplane.ReplicaBroken {
			why = "the owner's connection to it broke (" + rep.Error + "); the owner holds the answers to writes it could not mirror until it is told to go on alone"
		}
		s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonMirrorLost, fmt.Sprintf("mirror %s: %s", rep.Target, why)}
		s.requeueSoon = true
		return false
	}
	if !r.storedFresh(ctx, s) {
		return false
	}
	if err := s.ownerClient.SetCachedBdevMirror(ctx, name, nil); err != nil {
		s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonDataplaneError, fmt.Sprintf("detach the owner from mirror %s: %v", rep.Target, err)}
		s.requeueSoon = true
		return false
	}
	ctrl.LoggerFrom(ctx).Info("owner detached from its mirror", "mirror", rep.Target, "state", rep.State, "error", rep.Error)
	r.event(s.vol, corev1.EventTypeWarning, "MirrorDetached", "the owner stopped forwarding writes to %s (%s); it goes on alone until a mirror is in sync", rep.Target, rep.State)
	s.ownerReplica = nil
	return true
}

// linkMirror connects the owner to the mirror d was applied to (c) when it
// is not connected yet, making the mirror's copy anew first if it is not
// empty, and reports Mirrored from the owner's replica state.
func (r *Reconciler) linkMirror(ctx context.Context, s *scope, c *dataplane.Client, d Desired, applied ApplyResult, target dataplane.MirrorTarget) *MirrorObservation {
	mirror, name := s.vol.Status.Mirror, d.Cached.Name
	if s.ownerReplica != nil && copyMadeAnew(applied) {
		// The mirror's dataplane restarted without its configuration: the
		// copy the owner forwarded to is gone. Reconnected on the next
		// pass, once this is stored (releaseReplica).
		s.requeueSoon = true
		return &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonMirrorReplaced, fmt.Sprintf(
			"mirror %s's copy was made anew (its dataplane restarted?); the owner is connected to it again on the next pass", mirror)}
	}
	if s.ownerReplica == nil {
		if !r.storedFresh(ctx, s) {
			return &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonMirrorSyncing, "the volume changed since this pass read it; connecting the mirror on the next pass"}
		}
		st, err := c.CachedBdevStats(ctx, name)
		if err != nil {
			return &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonDataplaneError, fmt.Sprintf("mirror %s: %v", mirror, err)}
		}
		if st.Role != dataplane.RoleMirror || st.Usage.OccupancyBytes > 0 || st.DirtyBytes > 0 {
			// Its copy missed writes (or was a write-through mirror's):
			// only an empty copy may be connected.
			if err := remakeMirrorCopy(ctx, c, d); err != nil {
				return &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonDataplaneError, fmt.Sprintf("mirror %s: %v", mirror, err)}
			}
			ctrl.LoggerFrom(ctx).Info("mirror's copy made anew before connecting the owner", "mirror", mirror,
				"occupancyBytes", st.Usage.OccupancyBytes, "dirtyBytes", st.DirtyBytes, "role", st.Role)
		}
		if err := s.ownerClient.SetCachedBdevMirror(ctx, name, &target); err != nil {
			return &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonMirrorLost, fmt.Sprintf("connect the owner to mirror %s: %v", mirror, err)}
		}
		r.event(s.vol, corev1.EventTypeNormal, "MirrorConnected", "the owner forwards its writes to mirror %s", mirror)
		ost, err := s.ownerClient.CachedBdevStats(ctx, name)
		if err != nil || ost.Replica == nil {
			s.requeueSoon = true
			return &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonMirrorSyncing, fmt.Sprintf("the owner was connected to mirror %s; its state is read on the next pass", mirror)}
		}
		s.ownerReplica, s.ownerDirty = ost.Replica, ost.DirtyBytes
	}
	if s.ownerReplica.State != dataplane.ReplicaInSync {
		s.requeueSoon = true
		return &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonMirrorSyncing, fmt.Sprintf(
			"the owner forwards its writes to mirror %s and is writing back the dirty data the mirror lacks (%d dirty bytes on the owner)", mirror, s.ownerDirty)}
	}
	return &MirrorObservation{metav1.ConditionTrue, rcv1.ReasonAsExpected, fmt.Sprintf(
		"cache server %s holds a second copy of every acknowledged write and exports the volume's second path, inaccessible until it is promoted", mirror)}
}

// remakeMirrorCopy replaces the copy on the mirror c with an empty one
// (resetMirrorCopy, then Apply of d).
func remakeMirrorCopy(ctx context.Context, c *dataplane.Client, d Desired) error {
	if err := resetMirrorCopy(ctx, c, d.Volume); err != nil {
		return err
	}
	if _, err := Apply(ctx, c, d); err != nil {
		return fmt.Errorf("make its copy anew: %w", err)
	}
	return nil
}

// resetMirrorCopy removes the volume's copy on a mirror: the namespace of
// its host-facing subsystem (hosts keep the path, which serves nothing
// while it is the mirror's), the replication subsystem and the cached
// bdev, dirty data and all (the owner holds every byte of it or Ceph
// does). Apply then makes an empty one.
func resetMirrorCopy(ctx context.Context, c *dataplane.Client, vol string) error {
	if err := c.DeleteSubsystem(ctx, ReplicaNQN(vol)); err != nil && !dataplane.IsNotFound(err) && !dataplane.IsInvalid(err) {
		return fmt.Errorf("delete replication subsystem %s: %w", ReplicaNQN(vol), err)
	}
	nqn := SubsystemNQN(vol)
	sub, err := lookupSubsystem(ctx, c, nqn)
	if err != nil {
		return err
	}
	if sub != nil {
		for _, ns := range sub.Namespaces {
			if err := c.RemoveNamespace(ctx, nqn, ns.NSID); err != nil && !dataplane.IsNotFound(err) {
				return fmt.Errorf("remove namespace %d of subsystem %s: %w", ns.NSID, nqn, err)
			}
		}
	}
	if err := c.DeleteCachedBdev(ctx, CachedBdevName(vol), true); err != nil && !dataplane.IsNotFound(err) {
		return fmt.Errorf("delete the stale copy %s: %w", CachedBdevName(vol), err)
	}
	return nil
}
