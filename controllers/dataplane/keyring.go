package dataplane

import "context"

// Key is one entry of keyring_get_keys: a file key has a Path, a key held
// in memory has Module "memory".
type Key struct {
	Name   string `json:"name"`
	Path   string `json:"path,omitempty"`
	Module string `json:"module,omitempty"`
	InUse  bool   `json:"in_use"`
}

// Keys lists the keyring (names, never secrets).
func (c *Client) Keys(ctx context.Context) ([]Key, error) {
	var out []Key
	err := c.call(ctx, "keyring_get_keys", nil, &out)
	return out, err
}

// AddMemoryKey gives the dataplane a DH-HMAC-CHAP secret (DHHC-1 format)
// under name, held in its memory only (keyring_memory_add_key): it is
// never written to the server's disk. IsExists when the name is taken.
func (c *Client) AddMemoryKey(ctx context.Context, name string, secret Secret) error {
	return c.call(ctx, "keyring_memory_add_key", map[string]string{"name": name, "secret": string(secret)}, nil, secret)
}

// RemoveMemoryKey drops key name; a key a host still uses is refused.
func (c *Client) RemoveMemoryKey(ctx context.Context, name string) error {
	return c.call(ctx, "keyring_memory_remove_key", map[string]string{"name": name}, nil)
}

// HostKeyNames name the keyring keys a host authenticates with: Host
// proves the host, Ctrlr (optional) the controller to the host; PSK
// (optional) is the host's TLS PSK, without which it cannot reach a
// secure-channel listener.
type HostKeyNames struct {
	Host  string `json:"dhchap_key,omitempty"`
	Ctrlr string `json:"dhchap_ctrlr_key,omitempty"`
	PSK   string `json:"psk,omitempty"`
}

// AddHostWithKeys allows host on subsystem nqn; with keys, the host must
// authenticate every queue with DH-HMAC-CHAP.
func (c *Client) AddHostWithKeys(ctx context.Context, nqn, host string, keys HostKeyNames) error {
	p := hostKeysParams(nqn, host, keys)
	if keys.PSK != "" {
		p["psk"] = keys.PSK
	}
	return c.call(ctx, "nvmf_subsystem_add_host", p, nil)
}

// SetHostKeys replaces an allowed host's keys (rotation): connected queues
// go on; its next authentication needs the new keys.
func (c *Client) SetHostKeys(ctx context.Context, nqn, host string, keys HostKeyNames) error {
	p := hostKeysParams(nqn, host, keys)
	if keys.PSK != "" {
		// rackcache's: SPDK's set_keys has no PSK.
		p["rackcache_psk"] = keys.PSK
	}
	return c.call(ctx, "nvmf_subsystem_set_keys", p, nil)
}

func hostKeysParams(nqn, host string, keys HostKeyNames) map[string]string {
	p := map[string]string{"nqn": nqn, "host": host}
	if keys.Host != "" {
		p["dhchap_key"] = keys.Host
	}
	if keys.Ctrlr != "" {
		p["dhchap_ctrlr_key"] = keys.Ctrlr
	}
	return p
}
