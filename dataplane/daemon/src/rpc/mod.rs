//! JSON-RPC 2.0: errors with SPDK's codes and the socket server.

pub mod error;
pub mod server;
