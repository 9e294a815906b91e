//! The JSON-RPC methods, with SPDK's names and parameters, listed once in
//! [`table`]. Handlers are thin: they take their parameters parsed
//! (unknown members are refused), act on the state, and map errors in one
//! place ([`crate::rpc::error`]).

mod adacache;
mod bdev;
mod bdev_inspect;
mod ceph;
mod config_errors;
mod fault;
mod framework;
mod keyring;
mod lease;
mod mirror;
mod nvmf;
mod params;
mod registry;
mod resize;
pub mod saved_config;
pub mod table;

pub use table::{Effect, Method, METHODS};
