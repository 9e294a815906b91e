//! NVMe-oF methods (SPDK's `nvmf_*`): the TCP transport, subsystems,
//! listeners, namespaces and allowed hosts, and the "nvmf" section of
//! `save_config`.
//!
//! Parameters are SPDK's. Those of SPDK's that name a feature this target
//! lacks (ANA, TLS, DH-HMAC-CHAP, passthrough, EUI-64, ...) are accepted at
//! their "off" value, so SPDK's `rpc.py`, which sends them explicitly, works,
//! and refused otherwise; SPDK tunables of its own pollers and buffer pools,
//! or of other transports, are accepted and have no effect here (SPDK's TCP
//! transport ignores the RDMA-only ones too). Anything else is unknown and
//! refused.
//!
//! One extension: `nvmf_subsystem_add_listener` takes an optional
//! `rackcache_advertised: {"traddr", "trsvcid"}` (either or both), the
//! address the discovery log tells hosts to use when they reach the
//! listener through port forwarding at another address. It is saved with
//! the listener and shown in `nvmf_get_subsystems` under the same name.
//!
//! Access is revocable as in SPDK: `nvmf_subsystem_remove_host`,
//! `nvmf_subsystem_remove_listener` and `nvmf_delete_subsystem` tear down
//! the controllers that lose access (and `nvmf_subsystem_allow_any_host`
//! false those of hosts not listed, which SPDK does not) and answer once
//! their queue pairs have closed, waiting at most [`revoke::REVOKE_TIMEOUT`]
//! (`timeout_ms` for `remove_host`).
//!
//! The discovery subsystem takes listeners of its own (SPDK's
//! `nvmf_subsystem_add_listener discovery -t tcp -a ADDR -s 8009`; both its
//! NQN and the literal `discovery` name it), and still answers on every
//! NVM subsystem's listener.
//!
//! Error codes follow SPDK's nvmf RPCs: -32602 for bad input and unknown or
//! duplicate objects (with what is wrong in the message), -32603 for an
//! existing subsystem or transport, a negative errno for a failed bind.

pub(crate) mod config;
pub(crate) mod host;
pub(crate) mod inspect;
mod json;
pub(crate) mod listener;
pub(crate) mod namespace;
mod revoke;
pub(crate) mod set_config;
pub(crate) mod subsystem;
mod target;
pub(crate) mod transport;
