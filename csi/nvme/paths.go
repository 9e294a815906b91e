package nvme

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
)

// AddPaths connects subNQN at more portals, as the subsystem's existing
// controller was connected: the same host NQN and host id, reconnect
// settings and DH-HMAC-CHAP secrets (sysfs, root-only), TLS when it uses
// TLS (its PSK is in the keyring already). o gives what sysfs does not
// keep (keep-alive, I/O queues) and the fallbacks. A path that was
// already connected is left alone. Returns how many portals connected.
func (c *CLI) AddPaths(ctx context.Context, subNQN string, portals []Portal, o ConnectOptions) (int, error) {
	ctrl, err := c.controllerOf(subNQN)
	if err != nil {
		return 0, err
	}
	o.SubNQN = subNQN
	if v := readAttr(filepath.Join(ctrl, "hostnqn")); v != "" {
		o.HostNQN = v
	}
	if v := readAttr(filepath.Join(ctrl, "hostid")); v != "" {
		o.HostID = v
	}
	if v, ok := seconds(readAttr(filepath.Join(ctrl, "reconnect_delay"))); ok {
		o.ReconnectDelay = v
	}
	// "off": reconnect forever.
	switch v := readAttr(filepath.Join(ctrl, "ctrl_loss_tmo")); v {
	case "off":
		o.CtrlLossTmo = -1
	default:
		if n, ok := seconds(v); ok {
			o.CtrlLossTmo = n
		}
	}
	o.DHChapSecret = secret(readAttr(filepath.Join(ctrl, "dhchap_secret")))
	o.DHChapCtrlSecret = secret(readAttr(filepath.Join(ctrl, "dhchap_ctrl_secret")))
	// A TLS controller shows the serial of the PSK it took.
	o.TLS = secret(readAttr(filepath.Join(ctrl, "tls_key"))) != ""
	return c.connectEach(ctx, o, portals)
}

// RemovePath disconnects one controller (nvme3) of subNQN; a controller
// that is gone, or now belongs to another subsystem, is left alone.
func (c *CLI) RemovePath(ctx context.Context, subNQN, name string) error {
	if readAttr(filepath.Join(c.SysfsRoot, "class", "nvme", name, "subsysnqn")) != subNQN {
		return nil
	}
	if _, _, err := c.Exec(ctx, "nvme", "disconnect", "-d", name); err != nil {
		return fmt.Errorf("disconnect controller %s of %s: %w", name, subNQN, err)
	}
	return nil
}

// controllerOf is the sysfs directory of one controller of subNQN, a live
// one when there is one.
func (c *CLI) controllerOf(subNQN string) (string, error) {
	ctrls, _ := filepath.Glob(filepath.Join(c.SysfsRoot, "class", "nvme", "nvme*"))
	found := ""
	for _, d := range ctrls {
		if readAttr(filepath.Join(d, "subsysnqn")) != subNQN {
			continue
		}
		if readAttr(filepath.Join(d, "state")) == "live" {
			return d, nil
		}
		found = d
	}
	if found == "" {
		return "", fmt.Errorf("%w: no controller of %s in %s to copy its settings from", ErrNotFound, subNQN, c.SysfsRoot)
	}
	return found, nil
}

// seconds reads a sysfs count of seconds.
func seconds(v string) (int, bool) {
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 0
}

// secret is a sysfs key attribute's value, "" for the kernel's "none".
func secret(v string) string {
	if v == "none" {
		return ""
	}
	return v
}
