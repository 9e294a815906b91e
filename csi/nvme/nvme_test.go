package nvme

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const captureNQN = "nqn.2025-01.io.rackcache:vol:csi-vol-capture"

func TestParseListSubsys(t *testing.T) {
	subs, err := ParseListSubsys(fixture(t, "list-subsys-connected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 1 || subs[0].NQN != captureNQN || len(subs[0].Paths) != 1 {
		t.Fatalf("subsystems %+v", subs)
	}
	p := subs[0].Paths[0]
	if p.Name != "nvme0" || !p.Live() || !p.At("10.0.3.100", "4420") || p.At("10.0.3.100", "4421") || p.At("10.0.3.10", "4420") {
		t.Errorf("path %+v", p)
	}
	if subs, err := ParseListSubsys(fixture(t, "list-subsys-empty.json")); err != nil || len(subs) != 0 {
		t.Errorf("empty: %+v, %v", subs, err)
	}
	if subs, err := ParseListSubsys(nil); err != nil || len(subs) != 0 {
		t.Errorf("no output: %+v, %v", subs, err)
	}
	// nvme-cli 1.x: subsystems and their paths as alternating entries.
	v1 := `{"Subsystems":[{"Name":"nvme-subsys0","NQN":"` + captureNQN + `"},{"Paths":[{"Name":"nvme0","Transport":"tcp","Address":"traddr=10.0.0.1 trsvcid=4420","State":"live"}]}]}`
	subs, err = ParseListSubsys([]byte(v1))
	if err != nil || len(subs) != 1 || len(subs[0].Paths) != 1 || subs[0].Paths[0].Name != "nvme0" {
		t.Errorf("1.x output: %+v, %v", subs, err)
	}
	if _, err := ParseListSubsys([]byte("Failed to scan topology")); err == nil {
		t.Error("garbage parsed")
	}
}

// fakeNVMe answers `nvme list-subsys` with a fixture and records the
// other calls.
type fakeNVMe struct {
	listSubsys []byte
	calls      []string
	// failing calls contain this ("" for none).
	failing string
}

func (f *fakeNVMe) exec(_ context.Context, prog string, args ...string) ([]byte, []byte, error) {
	call := prog + " " + strings.Join(args, " ")
	if call == "nvme list-subsys -o json" {
		return f.listSubsys, nil, nil
	}
	f.calls = append(f.calls, call)
	if f.failing != "" && strings.Contains(call, f.failing) {
		return nil, nil, errors.New("connect refused")
	}
	return nil, nil, nil
}

func TestConnect(t *testing.T) {
	opts := ConnectOptions{SubNQN: captureNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:x", HostID: "x", CtrlLossTmo: 600, ReconnectDelay: 2, KeepAliveTmo: 5}
	connect := "nvme connect -t tcp -a 10.0.3.100 -s 4420 -n " + captureNQN + " --hostnqn nqn.2014-08.org.nvmexpress:uuid:x --ctrl-loss-tmo 600 --reconnect-delay 2 --keep-alive-tmo 5 --hostid x"
	connect2 := strings.Replace(connect, "-a 10.0.3.100", "-a 10.0.3.101", 1)
	owner, mirror := Portal{"10.0.3.100", "4420"}, Portal{"10.0.3.101", "4420"}
	for name, c := range map[string]struct {
		listSubsys string
		opts       func(*ConnectOptions)
		portals    []Portal
		failing    string
		want       []string
		connected  int
		wantErr    bool
	}{
		"a live controller there is reused":     {"list-subsys-connected.json", nil, []Portal{owner}, "", nil, 1, false},
		"none yet":                              {"list-subsys-empty.json", nil, []Portal{owner}, "", []string{connect}, 1, false},
		"a stale one (reconnecting) goes first": {"list-subsys-connecting.json", nil, []Portal{owner}, "", []string{"nvme disconnect -d nvme0", connect}, 1, false},
		"a live one at another portal goes first": {"list-subsys-connected.json", nil, []Portal{{"10.0.3.100", "4421"}},
			"", []string{"nvme disconnect -d nvme0", strings.Replace(connect, "-s 4420", "-s 4421", 1)}, 1, false},
		"queues when asked": {"list-subsys-empty.json", func(o *ConnectOptions) { o.NrIOQueues = 4 }, []Portal{owner}, "", []string{connect + " --nr-io-queues 4"}, 1, false},
		"TLS":               {"list-subsys-empty.json", func(o *ConnectOptions) { o.TLS = true }, []Portal{owner}, "", []string{connect + " --tls"}, 1, false},
		// Multipath: the owner's live path stays, the mirror's is added.
		"a second path joins a live one": {"list-subsys-connected.json", nil, []Portal{owner, mirror}, "", []string{connect2}, 2, false},
		"both paths":                     {"list-subsys-empty.json", nil, []Portal{owner, mirror}, "", []string{connect, connect2}, 2, false},
		// A lost server's path does not stop the other.
		"one path cannot connect": {"list-subsys-empty.json", nil, []Portal{owner, mirror}, "-a 10.0.3.100", []string{connect, connect2}, 1, true},
		"no path connects":        {"list-subsys-empty.json", nil, []Portal{owner}, "-a 10.0.3.100", []string{connect}, 0, true},
	} {
		f := &fakeNVMe{listSubsys: fixture(t, c.listSubsys), failing: c.failing}
		o := opts
		if c.opts != nil {
			c.opts(&o)
		}
		n, err := (&CLI{Exec: f.exec}).Connect(context.Background(), o, c.portals)
		if n != c.connected || (err != nil) != c.wantErr {
			t.Errorf("%s: %d connected, err %v; want %d, error %v", name, n, err, c.connected, c.wantErr)
		}
		if !reflect.DeepEqual(f.calls, c.want) {
			t.Errorf("%s: calls\n%v\nwant\n%v", name, f.calls, c.want)
		}
	}
}

// The PSK goes into the kernel keyring with the identity the 6.12 host
// looks up (version 0), never on a command line that is logged.
func TestInsertPSK(t *testing.T) {
	f := &fakeNVMe{}
	const psk = "NVMeTLSkey-1:01:c2VjcmV0:"
	if err := (&CLI{Exec: f.exec}).InsertPSK(context.Background(), "nqn.h", captureNQN, psk); err != nil {
		t.Fatal(err)
	}
	want := "nvme check-tls-key --keydata=" + psk + " --hostnqn=nqn.h --subsysnqn=" + captureNQN + " --identity=0 --insert"
	if !reflect.DeepEqual(f.calls, []string{want}) {
		t.Errorf("calls %v, want %s", f.calls, want)
	}
}

func TestDisconnect(t *testing.T) {
	f := &fakeNVMe{listSubsys: fixture(t, "list-subsys-empty.json")}
	if err := (&CLI{Exec: f.exec}).Disconnect(context.Background(), captureNQN); err != nil || len(f.calls) != 0 {
		t.Errorf("nothing connected: %v, calls %v", err, f.calls)
	}
	f = &fakeNVMe{listSubsys: fixture(t, "list-subsys-connecting.json")}
	if err := (&CLI{Exec: f.exec}).Disconnect(context.Background(), captureNQN); err != nil || !reflect.DeepEqual(f.calls, []string{"nvme disconnect -n " + captureNQN}) {
		t.Errorf("connected: %v, calls %v", err, f.calls)
	}
}

func TestHostNQNCreatedOnceThenStable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "nvme", "hostnqn")
	nqn, id, err := HostNQN(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(nqn, uuidNQNPrefix) || nqn != uuidNQNPrefix+id {
		t.Fatalf("created %q, %q", nqn, id)
	}
	again, id2, err := HostNQN(path)
	if err != nil || again != nqn || id2 != id {
		t.Errorf("second read %q %q %v, want the first", again, id2, err)
	}
	// An existing host NQN (the distribution's) is kept as it is.
	other := filepath.Join(t.TempDir(), "hostnqn")
	if err := os.WriteFile(other, []byte("nqn.2014-08.org.nvmexpress:uuid:5f1b0c2e-8d4a-4c61-9b7e-2a3d6e9f0c41\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nqn, id, err = HostNQN(other)
	if err != nil || nqn != "nqn.2014-08.org.nvmexpress:uuid:5f1b0c2e-8d4a-4c61-9b7e-2a3d6e9f0c41" || id != "5f1b0c2e-8d4a-4c61-9b7e-2a3d6e9f0c41" {
		t.Errorf("existing: %q %q %v", nqn, id, err)
	}
}
