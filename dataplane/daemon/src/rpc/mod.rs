//! JSON-RPC 2.0: errors with SPDK's codes, the Unix socket server, and the
//! token-protected HTTP endpoint on TCP.

pub mod error;
pub mod http;
pub mod server;
