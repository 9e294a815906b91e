package nvme

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Subsystem is one NVMe subsystem the host knows, with its paths
// (controllers).
type Subsystem struct {
	Name  string `json:"Name"`
	NQN   string `json:"NQN"`
	Paths []Path `json:"Paths"`
}

// Path is one controller of a subsystem.
type Path struct {
	Name      string `json:"Name"`
	Transport string `json:"Transport"`
	// Address is the kernel's "traddr=...,trsvcid=...[,src_addr=...]".
	Address string `json:"Address"`
	State   string `json:"State"`
}

// Live: the controller is connected and usable.
func (p Path) Live() bool { return p.State == "live" }

// At reports whether the path's portal is addr:port.
func (p Path) At(addr, port string) bool {
	f := addressFields(p.Address)
	return f["traddr"] == addr && f["trsvcid"] == port
}

// Portal is the path's address and port.
func (p Path) Portal() Portal {
	f := addressFields(p.Address)
	return Portal{f["traddr"], f["trsvcid"]}
}

// addressFields splits "traddr=a,trsvcid=p,src_addr=s".
func addressFields(a string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(a, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			out[k] = v
		}
	}
	return out
}

// ParseListSubsys reads `nvme list-subsys -o json`. nvme-cli 2.x prints a
// list of hosts, each with its subsystems; nvme-cli 1.x printed one object
// with a "Subsystems" list whose entries alternate between a subsystem and
// an object with its "Paths". Both are read; no subsystems is an empty
// list (nvme-cli 2.3 prints nothing at all then).
func ParseListSubsys(out []byte) ([]Subsystem, error) {
	trimmed := strings.TrimSpace(string(out))
	if trimmed == "" {
		return nil, nil
	}
	if strings.HasPrefix(trimmed, "[") {
		var hosts []struct {
			Subsystems []Subsystem `json:"Subsystems"`
		}
		if err := json.Unmarshal([]byte(trimmed), &hosts); err != nil {
			return nil, fmt.Errorf("read nvme list-subsys output: %w", err)
		}
		var subs []Subsystem
		for _, h := range hosts {
			subs = append(subs, h.Subsystems...)
		}
		return subs, nil
	}
	var v1 struct {
		Subsystems []Subsystem `json:"Subsystems"`
	}
	if err := json.Unmarshal([]byte(trimmed), &v1); err != nil {
		return nil, fmt.Errorf("read nvme list-subsys output: %w", err)
	}
	// 1.x: {"Name","NQN"} followed by {"Paths":[...]}.
	var subs []Subsystem
	for _, s := range v1.Subsystems {
		if s.NQN == "" && len(subs) > 0 {
			subs[len(subs)-1].Paths = append(subs[len(subs)-1].Paths, s.Paths...)
			continue
		}
		subs = append(subs, s)
	}
	return subs, nil
}
