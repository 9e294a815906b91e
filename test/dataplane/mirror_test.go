package dataplane_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// The operator's mirrored write-back calls against two real dataplanes:
// a mirror's volume created with its role and epoch and served on a
// replication subsystem to the owner's host NQN only, the owner connected
// to it (its stats report the mirror in sync), an older epoch refused, the
// mirror dropped. (The data path, kill -9 of the owner and a lost mirror:
// the dataplane's own tests, dataplane/daemon/tests/mirror.rs.)
func TestGoClientMirror(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	const (
		replicaNQN = "nqn.2016-06.io.rackcache:go-mirror:replica"
		ownerHost  = "nqn.2014-08.io.rackcache:server:go-owner"
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner, mirror := framework.StartDataplane(t), framework.StartDataplane(t)
	epoch := uint64(3)
	for _, dp := range []*framework.Dataplane{owner, mirror} {
		dp.Call(t, "bdev_malloc_create", map[string]any{"name": "Core0", "num_blocks": 16384, "block_size": 512}, nil)
		dp.Call(t, "bdev_malloc_create", map[string]any{"name": "Cache0", "num_blocks": 131072, "block_size": 512}, nil)
	}
	p := dataplane.CachedBdevParams{Name: "C0", CoreBdevName: "Core0", CacheBdevName: "Cache0", CacheSizeMiB: 8,
		WriteMode: dataplane.WriteBack, Epoch: &epoch}
	mp := p
	mp.Role = dataplane.RoleMirror
	if _, err := mirror.Client.CreateCachedBdev(ctx, mp); err != nil {
		t.Fatalf("create the mirror's volume: %v", err)
	}
	port := framework.FreeLoopbackPort(t)
	mirror.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP"}, nil)
	mirror.Call(t, "nvmf_create_subsystem", map[string]any{"nqn": replicaNQN}, nil)
	mirror.Call(t, "nvmf_subsystem_add_ns", map[string]any{"nqn": replicaNQN, "namespace": map[string]any{"bdev_name": "C0", "nsid": 1}}, nil)
	mirror.Call(t, "nvmf_subsystem_add_host", map[string]any{"nqn": replicaNQN, "host": ownerHost}, nil)
	mirror.Call(t, "nvmf_subsystem_add_listener", map[string]any{"nqn": replicaNQN, "listen_address": map[string]any{
		"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": strconv.Itoa(port)}}, nil)

	oc := owner.Client
	if _, err := oc.CreateCachedBdev(ctx, p); err != nil {
		t.Fatalf("create the owner's volume: %v", err)
	}
	target := dataplane.MirrorTarget{TrAddr: "127.0.0.1", TrSvcID: strconv.Itoa(port), SubNQN: replicaNQN, HostNQN: "nqn.2014-08.io.rackcache:server:not-allowed"}
	if err := oc.SetCachedBdevMirror(ctx, "C0", &target); err == nil {
		t.Fatal("a host NQN the mirror does not allow connected")
	}
	target.HostNQN = ownerHost
	if err := oc.SetCachedBdevMirror(ctx, "C0", &target); err != nil {
		t.Fatalf("SetCachedBdevMirror: %v", err)
	}
	st, err := oc.CachedBdevStats(ctx, "C0")
	if err != nil || st.Role != dataplane.RoleOwner || st.Epoch == nil || *st.Epoch != 3 || st.Held ||
		st.Replica == nil || st.Replica.State != dataplane.ReplicaInSync || st.Replica.Target != replicaNQN+"@127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("the owner's stats: %+v (replica %+v), %v", st, st.Replica, err)
	}
	ms, err := mirror.Client.CachedBdevStats(ctx, "C0")
	if err != nil || ms.Role != dataplane.RoleMirror || ms.Replica != nil {
		t.Fatalf("the mirror's stats: %+v, %v", ms, err)
	}
	older := uint64(2)
	if err := oc.SetCachedBdevRole(ctx, "C0", dataplane.RoleOwner, &older); err == nil {
		t.Error("an older epoch was taken")
	}
	if err := mirror.Client.SetCachedBdevMirror(ctx, "C0", &target); err == nil {
		t.Error("a mirror was given a mirror")
	}
	if err := oc.SetCachedBdevMirror(ctx, "C0", nil); err != nil {
		t.Fatalf("drop the mirror: %v", err)
	}
	if st, err := oc.CachedBdevStats(ctx, "C0"); err != nil || st.Replica != nil {
		t.Errorf("after the drop: %+v, %v", st, err)
	}
	newer := uint64(4)
	if err := mirror.Client.SetCachedBdevRole(ctx, "C0", dataplane.RoleOwner, &newer); err != nil {
		t.Errorf("promote the mirror: %v", err)
	}
	if ms, err := mirror.Client.CachedBdevStats(ctx, "C0"); err != nil || ms.Role != dataplane.RoleOwner || *ms.Epoch != 4 {
		t.Errorf("the promoted mirror's stats: %+v, %v", ms, err)
	}
}
