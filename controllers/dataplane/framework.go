package dataplane

import (
	"context"
	"encoding/json"
)

// Framework methods: version, method list, configuration.

// Version is spdk_get_version's answer: the dataplane's own version text and
// the SPDK release whose RPC it follows.
type Version struct {
	Version string `json:"version"`
	Fields  struct {
		Major  int    `json:"major"`
		Minor  int    `json:"minor"`
		Patch  int    `json:"patch"`
		Suffix string `json:"suffix"`
	} `json:"fields"`
}

// Version asks the dataplane for its version (also a cheap liveness call).
func (c *Client) Version(ctx context.Context) (*Version, error) {
	var v Version
	if err := c.call(ctx, "spdk_get_version", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Methods lists the methods the dataplane serves (rpc_get_methods), so a
// caller can tell whether an older dataplane has one.
func (c *Client) Methods(ctx context.Context) ([]string, error) {
	var out []string
	err := c.call(ctx, "rpc_get_methods", nil, &out)
	return out, err
}

// ConfigCall is one call that recreates an object.
type ConfigCall struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// SubsystemConfig is one section of the configuration, in replay order.
type SubsystemConfig struct {
	Subsystem string       `json:"subsystem"`
	Config    []ConfigCall `json:"config"`
}

// Config is save_config's answer: the calls that recreate the dataplane's
// state (bdev section first, then nvmf). It carries cephx keys in the
// bdev_rbd_register_cluster params: never log it.
type Config struct {
	Subsystems []SubsystemConfig `json:"subsystems"`
}

// SaveConfig returns the dataplane's whole configuration.
func (c *Client) SaveConfig(ctx context.Context) (*Config, error) {
	var cfg Config
	if err := c.call(ctx, "save_config", nil, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// ConfigError is a start-up configuration call that failed and that the
// dataplane keeps for a retry (rackcache_get_config_errors).
type ConfigError struct {
	ID        uint64 `json:"id"`
	Subsystem string `json:"subsystem"`
	Method    string `json:"method"`
	// Object is what the call makes: its name, else its NQN.
	Object string `json:"object"`
	// Params summarizes the parameters (no secrets).
	Params  string `json:"params"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// ConfigErrors lists the kept failed start-up calls.
func (c *Client) ConfigErrors(ctx context.Context) ([]ConfigError, error) {
	var out []ConfigError
	err := c.call(ctx, "rackcache_get_config_errors", nil, &out)
	return out, err
}

// DropConfigError forgets kept call id (also in the persisted file).
func (c *Client) DropConfigError(ctx context.Context, id uint64) error {
	return c.call(ctx, "rackcache_drop_config_error", map[string]any{"id": id}, nil)
}
