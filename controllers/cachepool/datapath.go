package cachepool

import (
	"context"
	"fmt"
	"net/netip"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

// dataAddress asks the server for its interface addresses and picks the
// one the pool's data path names: "" when the pool names none (hosts use
// the node's address), an error when the server has none that fits.
func dataAddress(ctx context.Context, c *dataplane.Client, dp rcv1.DataPath) (string, error) {
	if !dp.NamesDataPath() {
		return "", nil
	}
	addrs, err := c.Addresses(ctx)
	if err != nil {
		return "", err
	}
	return pickDataAddress(addrs, dp)
}

// pickDataAddress is the address of an up interface that dp names (its
// name, or an address in its network), IPv4 before IPv6 and in the
// server's order otherwise.
func pickDataAddress(addrs []dataplane.Address, dp rcv1.DataPath) (string, error) {
	var network netip.Prefix
	if dp.Network != "" {
		var err error
		if network, err = netip.ParsePrefix(dp.Network); err != nil {
			return "", fmt.Errorf("dataPath.network %q: %w", dp.Network, err)
		}
	}
	var v6 string
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || !a.Up {
			continue
		}
		if (dp.Interface != "" && a.Interface != dp.Interface) || (dp.Network != "" && !network.Contains(ip)) {
			continue
		}
		if ip.Is4() {
			return ip.String(), nil
		}
		if v6 == "" {
			v6 = ip.String()
		}
	}
	if v6 != "" {
		return v6, nil
	}
	if dp.Interface != "" {
		return "", fmt.Errorf("no address on interface %s (dataPath.interface) is up on this server", dp.Interface)
	}
	return "", fmt.Errorf("no address in %s (dataPath.network) is up on this server", dp.Network)
}
