//! The NVMe/TCP transport.

pub mod bufpool;
pub mod connection;
pub mod outbox;
