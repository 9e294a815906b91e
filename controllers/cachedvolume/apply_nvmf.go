package cachedvolume

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rackcache/rackcache/controllers/dataplane"
)

// lookupSubsystem returns the subsystem nqn, or nil when there is none (the
// dataplane answers an unknown NQN with invalid params, as SPDK does).
func lookupSubsystem(ctx context.Context, c *dataplane.Client, nqn string) (*dataplane.Subsystem, error) {
	subs, err := c.Subsystems(ctx, nqn)
	if dataplane.IsInvalid(err) || dataplane.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up subsystem %s: %w", nqn, err)
	}
	for i := range subs {
		if subs[i].NQN == nqn {
			return &subs[i], nil
		}
	}
	return nil, nil
}

// ensureSubsystem makes the volume's subsystem match: namespace 1 on the
// cached bdev, the listener, and exactly the allowed hosts.
func ensureSubsystem(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	nqn := d.Subsystem.NQN
	sub, err := lookupSubsystem(ctx, c, nqn)
	if err != nil {
		return err
	}
	if sub == nil {
		createErr := c.CreateSubsystem(ctx, d.Subsystem)
		// A subsystem that exists already answers an internal error, not
		// EEXIST: read the state again to tell.
		if sub, err = lookupSubsystem(ctx, c, nqn); err != nil {
			return err
		}
		if sub == nil {
			return fmt.Errorf("create subsystem %s: %w", nqn, createErr)
		}
		res.Created = append(res.Created, "subsystem "+nqn)
	}
	res.ANAReporting, res.MinCntlid = sub.ANAReporting, sub.MinCntlid
	if !sub.ANAReporting {
		// Created before ANA reporting: it serves one path, as before,
		// and cannot take a mirror until the volume is re-created.
		d.Namespace.ANAGroup, d.ANAState = 0, ""
	}
	if sub.AllowAnyHost {
		if err := c.AllowAnyHost(ctx, nqn, false); err != nil {
			return fmt.Errorf("restrict subsystem %s to its allowed hosts: %w", nqn, err)
		}
		res.Changed = append(res.Changed, "allow_any_host false")
	}
	if err := ensureNamespace(ctx, c, d, sub, res); err != nil {
		return err
	}
	if err := ensureListener(ctx, c, d, sub, res); err != nil {
		return err
	}
	return ensureHosts(ctx, c, d, sub, res)
}

func ensureNamespace(ctx context.Context, c *dataplane.Client, d Desired, sub *dataplane.Subsystem, res *ApplyResult) error {
	nqn, want := d.Subsystem.NQN, d.Namespace
	for _, ns := range sub.Namespaces {
		if ns.NSID != want.NSID {
			continue
		}
		if ns.BdevName == want.BdevName && strings.EqualFold(ns.UUID, want.UUID) {
			return nil
		}
		// Another bdev or identity on our NSID: hosts must see ours.
		if err := c.RemoveNamespace(ctx, nqn, ns.NSID); err != nil {
			return fmt.Errorf("remove namespace %d (bdev %s) of subsystem %s: %w", ns.NSID, ns.BdevName, nqn, err)
		}
	}
	if _, err := c.AddNamespace(ctx, nqn, want); err != nil {
		return fmt.Errorf("add namespace %d (bdev %s) to subsystem %s: %w", want.NSID, want.BdevName, nqn, err)
	}
	res.Created = append(res.Created, "namespace")
	return nil
}

func sameListener(a, b dataplane.ListenAddress) bool {
	return strings.EqualFold(a.TrType, b.TrType) && a.TrAddr == b.TrAddr && a.TrSvcID == b.TrSvcID
}

// ensureListener adds the server's listener and removes others (an address
// or port the pool no longer uses).
func ensureListener(ctx context.Context, c *dataplane.Client, d Desired, sub *dataplane.Subsystem, res *ApplyResult) error {
	nqn := d.Subsystem.NQN
	found := false
	for _, l := range sub.ListenAddresses {
		if sameListener(l, d.Listener) {
			found = true
			continue
		}
		if err := c.RemoveListener(ctx, nqn, l); err != nil && !dataplane.IsInvalid(err) && !dataplane.IsNotFound(err) {
			return fmt.Errorf("remove listener %s:%s of subsystem %s: %w", l.TrAddr, l.TrSvcID, nqn, err)
		}
		res.Changed = append(res.Changed, "removed listener "+l.TrAddr+":"+l.TrSvcID)
	}
	if found {
		return ensureANAState(ctx, c, d, res)
	}
	// Added with its ANA state: a mirror's path is never optimized, not
	// even for a moment.
	if err := c.AddListener(ctx, nqn, d.Listener, d.ANAState); err != nil {
		return fmt.Errorf("add listener %s:%s to subsystem %s: %w", d.Listener.TrAddr, d.Listener.TrSvcID, nqn, err)
	}
	res.Created = append(res.Created, "listener")
	res.ANAState = d.ANAState
	return nil
}

// ensureANAState sets the state the listener reports for the volume's ANA
// group: a restarted server brings its listeners back inaccessible, and
// only this call (the operator confirming the server's role) makes the
// owner's path optimized again.
func ensureANAState(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	if d.ANAState == "" {
		return nil
	}
	nqn := d.Subsystem.NQN
	listeners, err := c.Listeners(ctx, nqn)
	if err != nil {
		return fmt.Errorf("read the ANA states of subsystem %s: %w", nqn, err)
	}
	for _, l := range listeners {
		if !sameListener(l.Address, d.Listener) {
			continue
		}
		for _, g := range l.ANAStates {
			if g.Group == anaGroup && g.State == d.ANAState {
				res.ANAState = d.ANAState
				return nil
			}
		}
	}
	if err := c.SetANAState(ctx, nqn, d.Listener, d.ANAState, anaGroup); err != nil {
		return fmt.Errorf("set ANA state %s on listener %s:%s of subsystem %s: %w", d.ANAState, d.Listener.TrAddr, d.Listener.TrSvcID, nqn, err)
	}
	res.Changed = append(res.Changed, "ANA state "+string(d.ANAState))
	res.ANAState = d.ANAState
	return nil
}

// ensureHosts allows exactly d.Hosts, each with its keys: removing a host
// also ends its live connections in the dataplane; a host whose keys
// changed (rotation) gets them with set_keys, its queues going on; keys no
// host uses any more leave the keyring.
func ensureHosts(ctx context.Context, c *dataplane.Client, d Desired, sub *dataplane.Subsystem, res *ApplyResult) error {
	nqn := d.Subsystem.NQN
	have := map[string]dataplane.HostKeyNames{}
	for _, h := range sub.Hosts {
		have[h.NQN] = h.HostKeyNames
	}
	for h := range have {
		if slices.Contains(d.Hosts, h) {
			continue
		}
		if err := c.RemoveHost(ctx, nqn, h); err != nil {
			return fmt.Errorf("revoke host %s from subsystem %s: %w", h, nqn, err)
		}
		res.Changed = append(res.Changed, "removed host "+h)
	}
	keyring, err := hostKeyNames(ctx, c, d.Volume)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, h := range d.Hosts {
		want := d.HostKeys[h]
		keep[want.Names.Host], keep[want.Names.Ctrlr], keep[want.Names.PSK] = true, true, true
		if err := ensureKeys(ctx, c, keyring, want); err != nil {
			return err
		}
		current, ok := have[h]
		switch {
		case !ok:
			if err := c.AddHostWithKeys(ctx, nqn, h, want.Names); err != nil {
				return fmt.Errorf("allow host %s on subsystem %s: %w", h, nqn, err)
			}
			res.Changed = append(res.Changed, "added host "+h)
		case current != want.Names:
			if err := c.SetHostKeys(ctx, nqn, h, want.Names); err != nil {
				return fmt.Errorf("set the keys of host %s on subsystem %s: %w", h, nqn, err)
			}
			res.Changed = append(res.Changed, "new keys for host "+h)
		}
	}
	return dropKeys(ctx, c, keyring, keep)
}

// RevokeHosts removes from subsystem nqn every host not in allowed (the
// dataplane then ends their live connections). A missing subsystem has
// nobody to revoke.
func RevokeHosts(ctx context.Context, c *dataplane.Client, nqn string, allowed []string) error {
	sub, err := lookupSubsystem(ctx, c, nqn)
	if err != nil || sub == nil {
		return err
	}
	for _, h := range sub.Hosts {
		if slices.Contains(allowed, h.NQN) {
			continue
		}
		if err := c.RemoveHost(ctx, nqn, h.NQN); err != nil {
			return fmt.Errorf("revoke host %s from subsystem %s: %w", h.NQN, nqn, err)
		}
	}
	return nil
}
