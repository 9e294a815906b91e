package dataplane

import "context"

// NVMe-oF target: the TCP transport, subsystems with their listeners,
// namespaces and allowed hosts. As in SPDK, unknown subsystems, namespaces,
// bdevs and hosts and duplicate namespaces, hosts and listeners are answered
// with CodeInvalidParams (IsInvalid), and a second transport or subsystem of
// one NQN with CodeInternalError, not ENOENT/EEXIST: read the state
// (Subsystems) to tell them apart.

// Transport is nvmf_create_transport's parameters; zero fields take the
// dataplane's defaults.
type Transport struct {
	// TrType is "TCP" (the only transport).
	TrType              string `json:"trtype"`
	MaxQueueDepth       uint16 `json:"max_queue_depth,omitempty"`
	MaxIOQpairsPerCtrlr uint16 `json:"max_io_qpairs_per_ctrlr,omitempty"`
	InCapsuleDataSize   uint32 `json:"in_capsule_data_size,omitempty"`
	MaxIOSize           uint32 `json:"max_io_size,omitempty"`
	IOUnitSize          uint32 `json:"io_unit_size,omitempty"`
	MaxAQDepth          uint16 `json:"max_aq_depth,omitempty"`
	WriteTimeoutMs      uint64 `json:"rackcache_write_timeout_ms,omitempty"`
	MaxConnsPerListener uint32 `json:"rackcache_max_connections_per_listener,omitempty"`
}

// CreateTransport creates the NVMe/TCP transport (once per dataplane; a
// second call answers CodeInternalError).
func (c *Client) CreateTransport(ctx context.Context, t Transport) error {
	if t.TrType == "" {
		t.TrType = "TCP"
	}
	return c.call(ctx, "nvmf_create_transport", t, nil)
}

// SubsystemParams is nvmf_create_subsystem's parameters.
type SubsystemParams struct {
	NQN           string `json:"nqn"`
	SerialNumber  string `json:"serial_number,omitempty"`
	ModelNumber   string `json:"model_number,omitempty"`
	AllowAnyHost  bool   `json:"allow_any_host,omitempty"`
	MaxNamespaces uint32 `json:"max_namespaces,omitempty"`
	// ANAReporting: each listener reports an ANA state per group, so that
	// several servers can export the subsystem as paths of one volume.
	ANAReporting bool `json:"ana_reporting,omitempty"`
	// MinCntlid and MaxCntlid bound the controller ids it hands out
	// (0: the whole range): servers exporting one subsystem take
	// disjoint ranges, or a host refuses its second path.
	MinCntlid uint16 `json:"min_cntlid,omitempty"`
	MaxCntlid uint16 `json:"max_cntlid,omitempty"`
}

// CreateSubsystem creates an NVM subsystem (CodeInternalError when the NQN
// exists).
func (c *Client) CreateSubsystem(ctx context.Context, p SubsystemParams) error {
	return c.call(ctx, "nvmf_create_subsystem", p, nil)
}

// DeleteSubsystem deletes a subsystem, disconnecting its hosts (its
// namespaces' bdevs stay).
func (c *Client) DeleteSubsystem(ctx context.Context, nqn string) error {
	return c.call(ctx, "nvmf_delete_subsystem", map[string]string{"nqn": nqn}, nil)
}

// Advertised overrides the address a listener gives in discovery log pages
// (the server's address reachable from the hosts, when it binds another).
type Advertised struct {
	TrAddr  string `json:"traddr,omitempty"`
	TrSvcID string `json:"trsvcid,omitempty"`
}

// ListenAddress is a transport id. For TCP: TrType "TCP", AdrFam "IPv4" or
// "IPv6" (optional), TrAddr an IP address, TrSvcID the port.
type ListenAddress struct {
	TrType     string      `json:"trtype"`
	AdrFam     string      `json:"adrfam,omitempty"`
	TrAddr     string      `json:"traddr"`
	TrSvcID    string      `json:"trsvcid,omitempty"`
	Advertised *Advertised `json:"rackcache_advertised,omitempty"`
	// SecureChannel: hosts reach the listener only through TLS with a
	// PSK (sent as the call's secure_channel, not in the address).
	SecureChannel bool `json:"-"`
}

// Host is an allowed host of a subsystem, with the names of its keys.
type Host struct {
	NQN string `json:"nqn"`
	HostKeyNames
}

// Namespace is a namespace of a subsystem, as added and as listed. NGUID
// (32 hexadecimal digits) and UUID are generated when empty; give stable
// ones so a recreated namespace looks the same to the hosts.
type Namespace struct {
	NSID     uint32 `json:"nsid,omitempty"`
	BdevName string `json:"bdev_name"`
	NGUID    string `json:"nguid,omitempty"`
	UUID     string `json:"uuid,omitempty"`
	// ANAGroup is the namespace's ANA group (its NSID when 0); listed
	// for subsystems with ANA reporting only.
	ANAGroup uint32 `json:"anagrpid,omitempty"`
}

// Subsystem is one entry of nvmf_get_subsystems.
type Subsystem struct {
	NQN             string          `json:"nqn"`
	Subtype         string          `json:"subtype"`
	ListenAddresses []ListenAddress `json:"listen_addresses"`
	AllowAnyHost    bool            `json:"allow_any_host"`
	Hosts           []Host          `json:"hosts"`
	SerialNumber    string          `json:"serial_number"`
	ModelNumber     string          `json:"model_number"`
	MaxNamespaces   uint32          `json:"max_namespaces"`
	Namespaces      []Namespace     `json:"namespaces"`
	// ANAReporting: the subsystem was created with ANA reporting.
	ANAReporting bool `json:"ana_reporting"`
	// MinCntlid and MaxCntlid bound its controller ids.
	MinCntlid uint16 `json:"min_cntlid"`
	MaxCntlid uint16 `json:"max_cntlid"`
}

// Subsystems lists every subsystem, the discovery subsystem first
// (nqn "", the default), or the one named (IsInvalid when there is none).
func (c *Client) Subsystems(ctx context.Context, nqn string) ([]Subsystem, error) {
	var p any
	if nqn != "" {
		p = map[string]string{"nqn": nqn}
	}
	var out []Subsystem
	err := c.call(ctx, "nvmf_get_subsystems", p, &out)
	return out, err
}

type listenerParams struct {
	NQN           string        `json:"nqn"`
	ListenAddress ListenAddress `json:"listen_address"`
	Advertised    *Advertised   `json:"rackcache_advertised,omitempty"`
	SecureChannel bool          `json:"secure_channel,omitempty"`
	ANAState      ANAState      `json:"ana_state,omitempty"`
}

// AddListener makes the subsystem reachable at a (binding it if no other
// subsystem listens there). a.Advertised, if set, is what discovery
// reports. ana, for a subsystem with ANA reporting, is the state the
// listener reports for every group from the start ("" for optimized).
func (c *Client) AddListener(ctx context.Context, nqn string, a ListenAddress, ana ANAState) error {
	p := listenerParams{NQN: nqn, ListenAddress: a, Advertised: a.Advertised, SecureChannel: a.SecureChannel, ANAState: ana}
	p.ListenAddress.Advertised = nil
	return c.call(ctx, "nvmf_subsystem_add_listener", p, nil)
}

// RemoveListener stops the subsystem listening at a.
func (c *Client) RemoveListener(ctx context.Context, nqn string, a ListenAddress) error {
	a.Advertised = nil
	return c.call(ctx, "nvmf_subsystem_remove_listener", listenerParams{NQN: nqn, ListenAddress: a}, nil)
}

// ANAState is what a listener reports for an ANA group.
type ANAState string

// The ANA states a control plane sets.
const (
	ANAOptimized    ANAState = "optimized"
	ANANonOptimized ANAState = "non_optimized"
	ANAInaccessible ANAState = "inaccessible"
)

// SetANAState sets the state listener a reports for ANA group group (every
// group when 0) of a subsystem with ANA reporting; hosts connected through
// a are told at once, and I/O through it to an inaccessible group fails
// over to their other paths. A restarted dataplane brings the listener
// back inaccessible.
func (c *Client) SetANAState(ctx context.Context, nqn string, a ListenAddress, state ANAState, group uint32) error {
	a.Advertised = nil
	p := struct {
		listenerParams
		ANAState ANAState `json:"ana_state"`
		ANAGroup uint32   `json:"anagrpid,omitempty"`
	}{listenerParams{NQN: nqn, ListenAddress: a}, state, group}
	return c.call(ctx, "nvmf_subsystem_listener_set_ana_state", p, nil)
}

// Listener is one entry of nvmf_subsystem_get_listeners: its address and,
// with ANA reporting, each group's state.
type Listener struct {
	Address   ListenAddress `json:"address"`
	ANAStates []struct {
		Group uint32   `json:"ana_group"`
		State ANAState `json:"ana_state"`
	} `json:"ana_states"`
}

// Listeners lists the subsystem's listeners.
func (c *Client) Listeners(ctx context.Context, nqn string) ([]Listener, error) {
	var out []Listener
	err := c.call(ctx, "nvmf_subsystem_get_listeners", map[string]string{"nqn": nqn}, &out)
	return out, err
}

// AddNamespace exposes a bdev as a namespace and returns its NSID.
func (c *Client) AddNamespace(ctx context.Context, nqn string, ns Namespace) (uint32, error) {
	var nsid uint32
	err := c.call(ctx, "nvmf_subsystem_add_ns", map[string]any{"nqn": nqn, "namespace": ns}, &nsid)
	return nsid, err
}

// RemoveNamespace removes a namespace (its bdev stays).
func (c *Client) RemoveNamespace(ctx context.Context, nqn string, nsid uint32) error {
	return c.call(ctx, "nvmf_subsystem_remove_ns", map[string]any{"nqn": nqn, "nsid": nsid}, nil)
}

// AddHost allows the host NQN to connect without authenticating.
func (c *Client) AddHost(ctx context.Context, nqn, host string) error {
	return c.AddHostWithKeys(ctx, nqn, host, HostKeyNames{})
}

// RemoveHost revokes the host, disconnecting its controllers.
func (c *Client) RemoveHost(ctx context.Context, nqn, host string) error {
	return c.call(ctx, "nvmf_subsystem_remove_host", map[string]string{"nqn": nqn, "host": host}, nil)
}

// AllowAnyHost lets every host in (allow) or only the added ones.
func (c *Client) AllowAnyHost(ctx context.Context, nqn string, allow bool) error {
	return c.call(ctx, "nvmf_subsystem_allow_any_host", map[string]any{"nqn": nqn, "allow_any_host": allow}, nil)
}

// Controller is one connected controller of a subsystem.
type Controller struct {
	CntlID      uint16 `json:"cntlid"`
	CntrlType   string `json:"cntrltype"`
	HostNQN     string `json:"hostnqn"`
	HostID      string `json:"hostid"`
	NumIOQpairs int    `json:"num_io_qpairs"`
}

// Controllers lists the subsystem's connected controllers.
func (c *Client) Controllers(ctx context.Context, nqn string) ([]Controller, error) {
	var out []Controller
	err := c.call(ctx, "nvmf_subsystem_get_controllers", map[string]string{"nqn": nqn}, &out)
	return out, err
}
