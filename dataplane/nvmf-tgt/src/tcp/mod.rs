//! The NVMe/TCP transport (SPDK's `lib/nvmf/tcp.c`): it moves PDUs and
//! data and calls the ctrlr layer ([`crate::ctrlr`]) for what commands
//! mean.
//!
//! - `listener`: accept loops, one task per accepted connection;
//! - `admission`: the listener's caps on hosts and on sockets that have
//!   not identified themselves yet;
//! - `serve`: that task's loop (socket, in-flight bdev operations,
//!   timers, shutdown);
//! - [`qpair`]: the queue pair's state: connection state, request slots
//!   indexed by transfer tag, buffers, and what each ctrlr
//!   `Outcome`(crate::ctrlr::Outcome) means for the wire;
//! - `tls`: the secure channel (TLS 1.3 with a PSK) of listeners that
//!   require it;
//! - `recv` and `send`: PDUs received (framing, digests, H2CData) and
//!   sent (responses, C2HData, R2T, ICResp, TermReq);
//! - [`bufpool`] (the data buffer budget and per-queue buffer reuse) and
//!   [`outbox`] (the output batch and its writer).

pub(crate) mod admission;
pub mod bufpool;
pub(crate) mod listener;
pub mod outbox;
pub mod qpair;
pub(crate) mod recv;
pub(crate) mod send;
pub(crate) mod serve;
#[cfg(test)]
mod tests;
pub(crate) mod tls;

pub(crate) use serve::serve;
