//! Conflicts with in-flight work: who holds a pinned block, and the FIFO
//! of refused requests.

use super::Engine;

/// A refused request, in the FIFO of refused requests: later requests that
/// conflict with it (overlap its blocks, one of the two writing) are
/// refused too, so it cannot be overtaken. It expires when the ticket it
/// waits for completes; the runtime retries refused requests in order
/// before new ones, which renews it if the request is refused again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waiter {
    /// Place in the queue (arrival order of first refusal).
    pub seq: u64,
    /// Volume range of the blocks the request touches.
    pub begin: u64,
    pub end: u64,
    /// The request writes (or completes partial blocks).
    pub exclusive: bool,
    /// The in-flight ticket it waits for.
    pub ticket: u32,
}

impl Engine {
    /// A ticket in flight that pins `id`. Only asked on a retry, so a scan of
    /// the tickets costs nothing on the hot path and no per-pin memory.
    pub(super) fn holder(&self, id: u32) -> Option<u32> {
        self.inflight
            .iter()
            .position(|r| r.active && r.pins.iter().any(|&(p, _)| p == id))
            .map(|t| t as u32)
    }

    /// Refused requests still waiting, oldest first (for the checker).
    pub(crate) fn waiters(&self) -> &[Waiter] {
        &self.waiters
    }
}
