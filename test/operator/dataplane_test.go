package operator

// What the specs read from the dataplanes themselves, through SPDK's own
// Python client on each dataplane's Unix socket: the operator's view (its
// status) is checked against the dataplane's, never against itself.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/gomega"

	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// spdkSubsystem is the part of nvmf_get_subsystems the specs read.
type spdkSubsystem struct {
	NQN             string `json:"nqn"`
	AllowAnyHost    bool   `json:"allow_any_host"`
	ListenAddresses []struct {
		TrAddr  string `json:"traddr"`
		TrSvcID string `json:"trsvcid"`
	} `json:"listen_addresses"`
	Hosts []struct {
		NQN string `json:"nqn"`
	} `json:"hosts"`
	Namespaces []struct {
		BdevName string `json:"bdev_name"`
		UUID     string `json:"uuid"`
	} `json:"namespaces"`
}

// spdkCachedBdev is the part of bdev_adacache_get_bdevs the specs read.
type spdkCachedBdev struct {
	Name          string `json:"name"`
	CoreBdevName  string `json:"core_bdev_name"`
	CacheBdevName string `json:"cache_bdev_name"`
	WriteMode     string `json:"write_mode"`
	CacheSizeMiB  uint64 `json:"cache_size_mib"`
}

// spdkRPC runs SPDK's stock command line (bin/venv/bin/spdk-rpc) against
// socket; rackcache's bdev_adacache_* methods come from its plugin
// (python/rackcache_rpc_plugin.py).
func spdkRPC(g Gomega, ctx context.Context, socket string, args ...string) []byte {
	root := framework.RepoRoot()
	full := []string{"-s", socket}
	if strings.HasPrefix(args[0], "bdev_adacache_") {
		full = append(full, "--plugin", "rackcache_rpc_plugin")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "venv", "bin", "spdk-rpc"), append(full, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred(), "spdk-rpc %s: %s", strings.Join(args, " "), stderr.String())
	return out
}

// subsystemsOf is nvmf_get_subsystems of s's dataplane, by NQN.
func subsystemsOf(g Gomega, ctx context.Context, s *standin.Server) map[string]spdkSubsystem {
	var list []spdkSubsystem
	out := spdkRPC(g, ctx, s.DP.Socket, "nvmf_get_subsystems")
	g.Expect(json.Unmarshal(out, &list)).To(Succeed(), "nvmf_get_subsystems: %s", out)
	byNQN := map[string]spdkSubsystem{}
	for _, sub := range list {
		byNQN[sub.NQN] = sub
	}
	return byNQN
}

// cachedBdevsOf is bdev_adacache_get_bdevs of s's dataplane, by name.
func cachedBdevsOf(g Gomega, ctx context.Context, s *standin.Server) map[string]spdkCachedBdev {
	var list []spdkCachedBdev
	out := spdkRPC(g, ctx, s.DP.Socket, "bdev_adacache_get_bdevs")
	g.Expect(json.Unmarshal(out, &list)).To(Succeed(), "bdev_adacache_get_bdevs: %s", out)
	byName := map[string]spdkCachedBdev{}
	for _, b := range list {
		byName[b.Name] = b
	}
	return byName
}

// expectServes checks, on s's dataplane, that the subsystem nqn exists,
// listens on the server's address and the pool's port, allows exactly
// hosts, and exports a cached bdev in writeMode (the dataplane's spelling)
// on the pool's first cache device; it returns that cached bdev.
func expectServes(g Gomega, ctx context.Context, s *standin.Server, nqn string, hosts []string, writeMode string) spdkCachedBdev {
	subs := subsystemsOf(g, ctx, s)
	g.Expect(subs).To(HaveKey(nqn), "subsystem %s on %s", nqn, s.In.Node)
	sub := subs[nqn]
	g.Expect(sub.AllowAnyHost).To(BeFalse(), "subsystem %s allows any host", nqn)
	var allowed []string
	for _, h := range sub.Hosts {
		allowed = append(allowed, h.NQN)
	}
	if len(hosts) == 0 {
		g.Expect(allowed).To(BeEmpty(), "allowed hosts of %s", nqn)
	} else {
		g.Expect(allowed).To(ConsistOf(hosts), "allowed hosts of %s", nqn)
	}
	g.Expect(sub.ListenAddresses).To(ContainElement(And(
		HaveField("TrAddr", s.In.IP), HaveField("TrSvcID", strconv.Itoa(nvmePort)))), "listeners of %s", nqn)
	g.Expect(sub.Namespaces).To(HaveLen(1), "namespaces of %s", nqn)
	bdevs := cachedBdevsOf(g, ctx, s)
	g.Expect(bdevs).To(HaveKey(sub.Namespaces[0].BdevName), "the namespace of %s exports a cached bdev", nqn)
	b := bdevs[sub.Namespaces[0].BdevName]
	g.Expect(b.CacheBdevName).To(Equal(servers.CacheBdevName(0)), "cache device of %s", b.Name)
	g.Expect(b.WriteMode).To(Equal(writeMode), "write mode of %s", b.Name)
	return b
}

// expectNotServing checks that s's dataplane has no subsystem nqn.
func expectNotServing(g Gomega, ctx context.Context, s *standin.Server, nqn string) {
	g.Expect(subsystemsOf(g, ctx, s)).NotTo(HaveKey(nqn), "subsystem %s on %s", nqn, s.In.Node)
}
