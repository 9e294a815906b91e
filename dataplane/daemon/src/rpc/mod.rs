//! JSON-RPC 2.0: errors with SPDK's codes, the Unix socket server, and the
//! token-protected HTTP endpoint on TCP with its reloading TLS certificate
//! and token.

pub mod error;
pub mod http;
pub mod server;
pub mod tls;
pub mod token;
