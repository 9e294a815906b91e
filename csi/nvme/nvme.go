// Package nvme attaches NVMe/TCP namespaces with the kernel's initiator:
// nvme-cli for connect and disconnect, sysfs (never udev, absent from many
// node images) to find controllers, their state and the namespaces' block
// devices.
package nvme

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrNotFound: no such controller, subsystem or namespace (yet).
var ErrNotFound = errors.New("not found")

// ConnectOptions are one `nvme connect`.
type ConnectOptions struct {
	Transport, Address, Port string
	SubNQN, HostNQN, HostID  string
	CtrlLossTmo              int
	ReconnectDelay           int
	KeepAliveTmo             int
	// NrIOQueues: 0 leaves the choice to the kernel.
	NrIOQueues int
	// DHChapSecret and DHChapCtrlSecret (DHHC-1 secrets, optional)
	// authenticate the host and, with the second, the controller.
	DHChapSecret, DHChapCtrlSecret string
	// TLS: NVMe/TCP's secure channel, with the PSK InsertPSK put into
	// the keyring (tlshd makes the handshake).
	TLS bool
}

// Exec runs a program (csi/exec.Run).
type Exec func(ctx context.Context, prog string, args ...string) ([]byte, []byte, error)

// CLI drives nvme-cli and reads sysfs under SysfsRoot ("/sys").
type CLI struct {
	Exec      Exec
	SysfsRoot string
}

// Portal is one address and port a subsystem is exported at.
type Portal struct{ Address, Port string }

// Connect makes sure a live controller of o.SubNQN exists at each portal
// (o.Address and o.Port are ignored): one path per cache server exporting
// the volume, joined by the kernel's native multipath into one namespace.
// A controller already live at a portal is reused; the subsystem's other
// controllers (left by an earlier loss: reconnecting forever, or at a
// portal no longer listed) are disconnected first, so that the namespace
// found afterwards is the one at these portals (a known failure of peers:
// a re-stage then found a stale namespace). It returns how many portals
// have a live controller and, joined, why the others do not: a path
// that cannot connect now (its server lost) does not stop the others.
func (c *CLI) Connect(ctx context.Context, o ConnectOptions, portals []Portal) (int, error) {
	subs, err := c.Subsystems(ctx)
	if err != nil {
		return 0, err
	}
	live := make([]bool, len(portals))
	for _, p := range pathsOf(subs, o.SubNQN) {
		at := slices.IndexFunc(portals, func(q Portal) bool { return p.At(q.Address, q.Port) })
		if at >= 0 && p.Live() && !live[at] {
			live[at] = true
			continue
		}
		if _, _, err := c.Exec(ctx, "nvme", "disconnect", "-d", p.Name); err != nil {
			return 0, fmt.Errorf("disconnect stale controller %s (%s, %s) of %s: %w", p.Name, p.State, p.Address, o.SubNQN, err)
		}
	}
	var missing []Portal
	for i, q := range portals {
		if !live[i] {
			missing = append(missing, q)
		}
	}
	connected, err := c.connectEach(ctx, o, missing)
	return len(portals) - len(missing) + connected, err
}

// connectEach runs one `nvme connect` of o per portal. It returns how many
// connected and, joined, why the others did not: one portal that cannot
// connect now (its server lost) does not stop the next.
func (c *CLI) connectEach(ctx context.Context, o ConnectOptions, portals []Portal) (int, error) {
	connected := 0
	var errs []error
	for _, q := range portals {
		o.Address, o.Port = q.Address, q.Port
		if _, _, err := c.Exec(ctx, "nvme", connectArgs(o)...); err != nil {
			errs = append(errs, fmt.Errorf("connect to %s at %s:%s: %w", o.SubNQN, q.Address, q.Port, err))
			continue
		}
		connected++
	}
	return connected, errors.Join(errs...)
}

// connectArgs are the arguments of `nvme connect` for o.
func connectArgs(o ConnectOptions) []string {
	transport := o.Transport
	if transport == "" {
		transport = "tcp"
	}
	args := []string{"connect", "-t", transport, "-a", o.Address, "-s", o.Port, "-n", o.SubNQN,
		"--hostnqn", o.HostNQN,
		"--ctrl-loss-tmo", strconv.Itoa(o.CtrlLossTmo),
		"--reconnect-delay", strconv.Itoa(o.ReconnectDelay),
		"--keep-alive-tmo", strconv.Itoa(o.KeepAliveTmo)}
	if o.HostID != "" {
		args = append(args, "--hostid", o.HostID)
	}
	if o.NrIOQueues > 0 {
		args = append(args, "--nr-io-queues", strconv.Itoa(o.NrIOQueues))
	}
	// exec.Run redacts the values of these flags in logs and errors.
	if o.DHChapSecret != "" {
		args = append(args, "--dhchap-secret", o.DHChapSecret)
	}
	if o.DHChapCtrlSecret != "" {
		args = append(args, "--dhchap-ctrl-secret", o.DHChapCtrlSecret)
	}
	if o.TLS {
		args = append(args, "--tls")
	}
	return args
}

// InsertPSK puts psk (NVMeTLSkey-1:01:...) into the kernel's .nvme keyring
// as hostNQN's retained PSK for subNQN, with the version 0 identity
// ("NVMe0R01 <hostnqn> <subnqn>") that the Linux host looks up at
// `nvme connect --tls`; a key already there under that identity is
// replaced.
func (c *CLI) InsertPSK(ctx context.Context, hostNQN, subNQN, psk string) error {
	if _, _, err := c.Exec(ctx, "nvme", "check-tls-key", "--keydata="+psk, "--hostnqn="+hostNQN,
		"--subsysnqn="+subNQN, "--identity=0", "--insert"); err != nil {
		return fmt.Errorf("insert the TLS PSK for %s into the kernel keyring: %w", subNQN, err)
	}
	return nil
}

// Disconnect removes every controller of subNQN; none is success.
func (c *CLI) Disconnect(ctx context.Context, subNQN string) error {
	subs, err := c.Subsystems(ctx)
	if err != nil {
		return err
	}
	if len(pathsOf(subs, subNQN)) == 0 {
		return nil
	}
	if _, _, err := c.Exec(ctx, "nvme", "disconnect", "-n", subNQN); err != nil {
		return fmt.Errorf("disconnect %s: %w", subNQN, err)
	}
	return nil
}

// Subsystems lists the host's subsystems and their paths
// (`nvme list-subsys -o json`).
func (c *CLI) Subsystems(ctx context.Context) ([]Subsystem, error) {
	out, _, err := c.Exec(ctx, "nvme", "list-subsys", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("list NVMe subsystems: %w", err)
	}
	return ParseListSubsys(out)
}

func pathsOf(subs []Subsystem, nqn string) []Path {
	var out []Path
	for _, s := range subs {
		if s.NQN == nqn {
			out = append(out, s.Paths...)
		}
	}
	slices.SortFunc(out, func(a, b Path) int { return strings.Compare(a.Name, b.Name) })
	return out
}
