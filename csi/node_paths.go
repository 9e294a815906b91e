package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
)

// HostPath is one controller the host has of a subsystem.
type HostPath struct {
	// Name is the kernel's controller name (nvme3).
	Name   string
	Portal Portal
	Live   bool
}

// PathNVMe is what following a volume's paths needs of the kernel's
// initiator.
type PathNVMe interface {
	// Attached lists the host's controllers by subsystem NQN.
	Attached(ctx context.Context) (map[string][]HostPath, error)
	// AddPaths connects the subsystem at more portals, as one of its
	// existing controllers was connected (host identity, reconnect
	// settings, keys, TLS); d fills in what the kernel does not keep.
	AddPaths(ctx context.Context, subNQN string, portals []Portal, d ConnectDefaults) (int, error)
	// RemovePath disconnects one controller of the subsystem.
	RemovePath(ctx context.Context, subNQN, name string) error
}

// PathFollower keeps the host's paths to each attached volume the ones
// its CachedVolume lists (`status.paths`): a mirror placed after the
// volume was staged gets a path, a server the volume left (a promoted
// mirror's lost owner, a removed mirror) loses its path. Hosts so follow
// a change of servers without a new publish. Started by the node plugin
// when it reaches the Kubernetes API.
type PathFollower struct {
	// Volumes reads CachedVolumes (an informer's cache).
	Volumes client.Reader
	NVMe    PathNVMe
	// Every is the period of a full pass; Changed (optional) wakes one
	// sooner, when a CachedVolume changed.
	Every   time.Duration
	Changed <-chan struct{}
}

// FollowPaths runs f until ctx ends.
func (d *Driver) FollowPaths(ctx context.Context, f PathFollower) error {
	log := logr.FromContextOrDiscard(ctx).WithName("paths")
	ctx = logr.NewContext(ctx, log)
	if f.Every <= 0 {
		f.Every = 30 * time.Second
	}
	tick := time.NewTicker(f.Every)
	defer tick.Stop()
	for {
		if err := d.SyncPaths(ctx, f); err != nil {
			log.Error(err, "following the volumes' paths")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-f.Changed:
		}
	}
}

// SyncPaths is one pass: each of the host's rackcache subsystems gets a
// path to every portal its CachedVolume lists, and loses the ones to
// portals it no longer lists, but only while a listed path is live (the
// host is never left with fewer live paths than it had). A subsystem
// whose volume is being staged or unstaged is left to that call.
func (d *Driver) SyncPaths(ctx context.Context, f PathFollower) error {
	attached, err := f.NVMe.Attached(ctx)
	if err != nil {
		return err
	}
	ours := map[string][]HostPath{}
	for nqn, have := range attached {
		if strings.HasPrefix(nqn, cachedvolume.NQNPrefix) {
			ours[nqn] = have
		}
	}
	if len(ours) == 0 {
		return nil
	}
	var list rcv1.CachedVolumeList
	if err := f.Volumes.List(ctx, &list); err != nil {
		return fmt.Errorf("list CachedVolumes: %w", err)
	}
	wanted := map[string][]Portal{}
	for i := range list.Items {
		cv := &list.Items[i]
		if cv.DeletionTimestamp != nil || cv.Status.NQN == "" {
			continue
		}
		portals, err := d.statusPortals(cv)
		if err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "volume paths", "volume", cv.Name)
			continue
		}
		wanted[cv.Status.NQN] = portals
	}
	var errs []error
	for nqn, have := range ours {
		want := wanted[nqn]
		if len(want) == 0 {
			continue
		}
		if err := d.followSubsystem(ctx, f, nqn, have, want); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// followSubsystem applies one subsystem's plan under its paths lock.
func (d *Driver) followSubsystem(ctx context.Context, f PathFollower, nqn string, have []HostPath, want []Portal) error {
	change := planPaths(have, want)
	if len(change.add) == 0 && len(change.remove) == 0 {
		return nil
	}
	unlock, err := d.locks.lock(pathsLock(nqn))
	if err != nil {
		return nil // a stage or unstage runs: the next pass sees its outcome
	}
	defer unlock()
	log := logr.FromContextOrDiscard(ctx).WithValues("subnqn", nqn)
	var errs []error
	if len(change.add) > 0 {
		n, err := f.NVMe.AddPaths(ctx, nqn, change.add, d.node.Connect)
		log.Info("connected the volume's new paths", "portals", change.add, "connected", n)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range change.remove {
		if err := f.NVMe.RemovePath(ctx, nqn, name); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("disconnected a path the volume no longer has", "controller", name)
	}
	return errors.Join(errs...)
}

// currentPortals replaces t's portals (from the publish context, which
// stays what it was at publish) with the ones the volume's CachedVolume
// lists now, when the node reads CachedVolumes: a stage after a
// promotion connects to the new owner and mirror, not to a lost server.
// When the volume cannot be read, the publish context's portals stay.
func (d *Driver) currentPortals(ctx context.Context, id volumeID, t target) target {
	if d.node.Volumes == nil {
		return t
	}
	log := logr.FromContextOrDiscard(ctx)
	var cv rcv1.CachedVolume
	if err := d.node.Volumes.Get(ctx, client.ObjectKey{Name: id.Image()}, &cv); err != nil {
		log.Info("volume's current paths unknown: connecting to the publish context's", "volume", id.String(), "error", err.Error())
		return t
	}
	portals, err := d.statusPortals(&cv)
	if err != nil || len(portals) == 0 || cv.Status.NQN != t.SubNQN {
		return t
	}
	t.Portals = portals
	return t
}

// pathsLock is the lock a subsystem's stage, unstage and path changes
// share.
func pathsLock(subNQN string) string { return "paths/" + subNQN }

// statusPortals are the volume's listed portals, as this node reaches
// them (the portal map applied).
func (d *Driver) statusPortals(cv *rcv1.CachedVolume) ([]Portal, error) {
	var out []Portal
	for _, p := range cv.Status.Paths {
		if p.Address == "" || p.Port == 0 {
			continue
		}
		q, err := d.mapPortal(Portal{p.Address, strconv.Itoa(int(p.Port))})
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// mapPortal is p as this node reaches it (--portal-map).
func (d *Driver) mapPortal(p Portal) (Portal, error) {
	to, ok := d.node.PortalMap[net.JoinHostPort(p.Address, p.Port)]
	if !ok {
		return p, nil
	}
	host, port, err := net.SplitHostPort(to)
	if err != nil {
		return p, fmt.Errorf("portal map entry %s: %w", to, err)
	}
	return Portal{host, port}, nil
}

// pathChange is what following does to one subsystem's controllers.
type pathChange struct {
	add    []Portal
	remove []string
}

// planPaths: every wanted portal without a controller gets one (a
// controller that is not live is the kernel's to reconnect); controllers
// at portals no longer wanted go, once a wanted portal has a live one.
func planPaths(have []HostPath, want []Portal) pathChange {
	var c pathChange
	wantedLive := false
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.Portal == w {
				found = true
				wantedLive = wantedLive || h.Live
			}
		}
		if !found {
			c.add = append(c.add, w)
		}
	}
	if !wantedLive {
		return c
	}
	for _, h := range have {
		kept := false
		for _, w := range want {
			kept = kept || h.Portal == w
		}
		if !kept {
			c.remove = append(c.remove, h.Name)
		}
	}
	return c
}
