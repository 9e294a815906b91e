//! JSON-RPC 2.0: errors with SPDK's codes, the Unix socket server, and the
//! token-protected HTTP endpoint on TCP with its reloading TLS certificate
//! and its callers' authentication (a shared token, or ServiceAccount
//! tokens the API server reviews).

pub mod auth;
pub mod error;
pub mod http;
pub mod review;
pub mod server;
pub mod tls;
pub mod token;
