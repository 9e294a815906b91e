package dataplane

import "context"

// Address is one interface address of the server (rackcache_get_addresses).
type Address struct {
	Interface string `json:"interface"`
	Address   string `json:"address"`
	Up        bool   `json:"up"`
}

// Addresses lists the server's interface addresses.
func (c *Client) Addresses(ctx context.Context) ([]Address, error) {
	var out []Address
	err := c.call(ctx, "rackcache_get_addresses", nil, &out)
	return out, err
}
