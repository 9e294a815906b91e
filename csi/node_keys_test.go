package csi

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rackcache/rackcache/controllers/hostkeys"
)

// The node finds its own pair in the secrets the kubelet passes; none is
// no keys (a pool without authentication); a Secret without this node's
// entry or with a corrupt one is refused with a reason, never connected
// without keys.
func TestHostKeysFromTheKubeletsSecrets(t *testing.T) {
	const me, other = "nqn.2014-08.org.nvmexpress:uuid:me", "nqn.2014-08.org.nvmexpress:uuid:other"
	d := &Driver{node: NodeOptions{HostNQN: me}}
	if k, err := d.hostKeys(nil); k != nil || err != nil {
		t.Fatalf("no secrets: %+v, %v", k, err)
	}
	pair, _ := hostkeys.NewPair(me, 2, time.Now(), true)
	data := map[string][]byte{}
	hostkeys.Put(data, pair)
	secrets := map[string]string{}
	for k, v := range data {
		secrets[k] = string(v)
	}
	k, err := d.hostKeys(secrets)
	if err != nil || k == nil || k.Host != pair.Host || k.Ctrl != pair.Ctrl || k.PSK != pair.PSK || k.PSK == "" {
		t.Fatalf("own pair: %+v, %v", k, err)
	}
	d.node.HostNQN = other
	if _, err := d.hostKeys(secrets); status.Code(toStatus(err)) != codes.FailedPrecondition {
		t.Errorf("another node's Secret: %v", err)
	}
	d.node.HostNQN = me
	secrets[hostkeys.EntryID(me)+".dhchap-secret"] = "DHHC-1:01:AAAA:"
	if _, err := d.hostKeys(secrets); status.Code(toStatus(err)) != codes.InvalidArgument {
		t.Errorf("a corrupt key: %v", err)
	}
}
