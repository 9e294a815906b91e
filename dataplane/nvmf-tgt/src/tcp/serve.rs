//! The queue pair task: one per connection, running `serve` until the
//! connection ends.
//!
//! Each turn of its loop
//! 1. hands newly submitted bdev operations to a `FuturesUnordered`,
//! 2. writes everything queued in the outbox (`write_out`: one batch per
//!    turn; given up when no byte moves for the write timeout, when the
//!    controller is torn down or its keep-alive expires, or when a drain
//!    started by shutdown times out: a host that does not read cannot hold
//!    the queue),
//! 3. waits for whichever comes first: bytes from the socket (all complete
//!    PDUs in the buffer are processed at once), a bdev completion (all
//!    ready ones are taken at once), the controller's teardown, target
//!    shutdown, the keep-alive deadline (admin queue), a pending
//!    asynchronous event (admin queue with AERs outstanding), buffer units
//!    for the oldest request in `AwaitingBuffer` (one acquisition kept
//!    across turns, so the request keeps its place in line), the deadline
//!    of the oldest request waiting for buffers or for H2CData, or the
//!    release of a parked Connect.
//!
//! When the loop ends, the operations already handed to bdevs are waited
//! for (up to the drain timeout) before the queue pair is closed. Those
//! still running then are abandoned (counted) but still awaited by a
//! detached task: the controller is released (a reconnecting host's parked
//! Connect proceeds) only once the last of them has completed.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use nvmf::tls::PskIdentity;

use super::admission::Admission;
use super::bufpool::{Grant, QueueBuffers};
use super::outbox::{Progress, Tracked};
use super::qpair::{ConnState, Connection};
use super::recv::RecvBuf;
use crate::ctrlr::controller::Controller;
use crate::poller::Poller;
use crate::state::{until_true, TargetState};

async fn wait_torn_down(rx: &mut Option<watch::Receiver<bool>>) {
    match rx {
        Some(rx) => {
            if rx.wait_for(|v| *v).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn notified_opt(n: Option<&tokio::sync::Notify>) {
    match n {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

async fn notified(ctrl: Option<&Controller>) {
    match ctrl {
        Some(c) => c.event_pending().await,
        None => std::future::pending().await,
    }
}

/// A wait for budget units that lives across loop turns.
type GrantWait = Pin<Box<dyn Future<Output = Grant> + Send>>;

/// The wait for the oldest `AwaitingBuffer` request's units, and which
/// request (slot, seq) it is for. Kept until that request stops being the
/// oldest: dropping it would give back units it was partly assigned and
/// its place in line.
struct GrantWaiter {
    wait: GrantWait,
    key: Option<(u16, u64)>,
}

impl GrantWaiter {
    fn new() -> Self {
        Self {
            wait: Box::pin(std::future::pending()),
            key: None,
        }
    }

    /// Waits for the request now oldest in `conn`'s line, if it changed.
    fn follow(&mut self, conn: &Connection) {
        let head = conn
            .waiting
            .front()
            .map(|&s| (s, conn.slots[s as usize].seq));
        if head == self.key {
            return;
        }
        self.key = head;
        self.wait = match head {
            Some((s, _)) => {
                let (host, shared) = conn.bufs.handles();
                let len = conn.slots[s as usize].len;
                Box::pin(QueueBuffers::grant_when_free(host, shared, len))
            }
            None => Box::pin(std::future::pending()),
        };
    }

    /// The wait has resolved: nothing is awaited until the next `follow`.
    fn clear(&mut self) {
        self.key = None;
        self.wait = Box::pin(std::future::pending());
    }
}

/// Resolves when a parked Connect may proceed: true once the earlier
/// controller has been released, false when `deadline` has passed first
/// (its abandoned commands may still be running: the Connect is then
/// refused with Controller Busy, and the host retries).
async fn released(parked: Option<(watch::Receiver<bool>, Instant)>) -> bool {
    match parked {
        Some((mut rx, deadline)) => tokio::time::timeout_at(deadline, until_true(&mut rx))
            .await
            .is_ok(),
        None => std::future::pending().await,
    }
}

/// Waits until every operation in `inflight` has completed or `deadline`
/// passes; returns how many were still running (abandoned).
async fn drain<F: std::future::Future>(
    inflight: &mut FuturesUnordered<F>,
    deadline: Instant,
) -> u64 {
    while !inflight.is_empty() {
        tokio::select! {
            _ = inflight.next() => {}
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    inflight.len() as u64
}

/// What the loop waits on besides the socket and the in-flight set,
/// carried across turns.
struct Watch {
    shutdown: watch::Receiver<bool>,
    teardown: Option<watch::Receiver<bool>>,
    drain_deadline: Option<Instant>,
    drain_timeout: Duration,
    write_timeout: Duration,
}

/// Writes the outbox out; returns why the queue pair must end, if it
/// must. A host that stops reading must not hold the queue pair (and with
/// it keep-alive expiry, teardown, draining and target shutdown) forever;
/// one that reads slowly keeps it as long as bytes move.
async fn write_out<W: AsyncWrite + Unpin>(
    conn: &mut Connection,
    wr: &mut W,
    w: &mut Watch,
    ctrl: Option<&Arc<Controller>>,
    ka_deadline: Option<Instant>,
    progress: &Progress,
    poller: &Poller,
) -> Option<&'static str> {
    progress.mark();
    let mut shutdown_seen = false;
    // While this write waits for the socket to drain, spinning cannot
    // speed it and takes the CPU the kernel's TCP work needs (see
    // `poller`); the guard ends the wait however the write ends.
    let _writing = poller.writing();
    let ended = {
        let mut tracked = Tracked::new(wr, progress);
        let flush = conn.tx.out.flush(&mut tracked, &mut conn.pool);
        tokio::pin!(flush);
        // Biased: the write usually completes at once, before the timers
        // are polled (and registered).
        loop {
            tokio::select! {
                biased;
                r = &mut flush => break match r {
                    Ok(()) => None,
                    Err(e) => {
                        tracing::debug!(peer = %conn.peer, "write: {e}");
                        Some("socket write failed")
                    }
                },
                _ = progress.stalled_for(w.write_timeout) => break Some("write made no progress: the host is not reading"),
                _ = wait_torn_down(&mut w.teardown) => break Some("controller torn down during a write"),
                _ = sleep_until(ka_deadline) => {
                    if let Some(c) = ctrl {
                        c.tear_down("keep-alive timeout");
                    }
                    break Some("keep-alive timeout during a write");
                }
                // Shutdown starts the drain while the write goes on; the
                // drain's deadline ends it.
                _ = until_true(&mut w.shutdown), if w.drain_deadline.is_none() => {
                    shutdown_seen = true;
                    w.drain_deadline = Some(Instant::now() + w.drain_timeout);
                }
                _ = sleep_until(w.drain_deadline) => break Some("drain timed out during a write"),
            }
        }
    };
    if shutdown_seen {
        conn.begin_drain();
    }
    ended
}

/// How a connection arrived.
pub(crate) struct Arrival {
    /// The host's address.
    pub peer: SocketAddr,
    /// The listener's address.
    pub listen: SocketAddr,
    /// Its place at the listener's gate.
    pub admission: Admission,
    /// The PSK identity its secure channel proved (None: plain TCP).
    pub secure: Option<Arc<PskIdentity>>,
}

/// Serves one accepted connection until it ends: `rd` and `wr` are the two
/// halves of its byte stream (a TCP socket's, a TLS session's, or an
/// in-memory pipe's in tests and the fuzzer).
///
/// However the queue pair ends, the commands it already handed to a bdev
/// are waited for before its controller is released: librbd, io_uring and
/// the delay bdev keep executing a submitted write, and a reconnecting host
/// must not have its new writes overtaken by stale ones. After the drain
/// timeout the queue pair closes and the rest is awaited in the background.
pub(crate) async fn serve<R, W>(
    mut rd: R,
    mut wr: W,
    arrival: Arrival,
    target: Arc<TargetState>,
    _drain: mpsc::Sender<()>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let Arrival {
        peer,
        listen,
        admission,
        secure,
    } = arrival;
    let opts = target.opts();
    let h2c_timeout = opts.h2c_data_timeout;
    // Until its ICReq and a Connect are through, the socket is no host.
    let identify_deadline = Instant::now() + opts.identify_timeout;
    let auth_timeout = opts.auth_timeout;
    // Set at Connect for a host that must authenticate, cleared once it
    // did.
    let mut auth_deadline: Option<Instant> = None;
    let mut w = Watch {
        shutdown: target.shutdown_signal(),
        teardown: None,
        drain_deadline: None,
        drain_timeout: opts.drain_timeout,
        write_timeout: opts.write_timeout,
    };
    let mut conn = Connection::new(target, peer, listen);
    conn.admission = admission;
    conn.ctrlr.set_secure_channel(secure);
    let mut rb = RecvBuf::new(2 * conn.tx.neg.max_plen as usize);
    let mut inflight = FuturesUnordered::new();
    let progress = Progress::default();
    let mut grants = GrantWaiter::new();
    let poller = conn.target.poller().clone();
    let mut owed = poller.owed();
    loop {
        poller.note_activity();
        for (slot, op) in conn.submit.drain(..) {
            inflight.push(op.run(slot));
        }
        let ctrl = conn.ctrlr.controller().cloned();
        if w.teardown.is_none() {
            w.teardown = ctrl.as_ref().map(|c| c.teardown_signal());
        }
        let authenticating = conn.ctrlr.awaits_authentication();
        if authenticating {
            auth_deadline.get_or_insert_with(|| Instant::now() + auth_timeout);
        } else {
            auth_deadline = None;
        }
        // Authenticated: the place at the gate becomes a host slot.
        if !authenticating && ctrl.is_some() && conn.admission.is_unidentified() {
            if !conn.admission.reserve_host() {
                if conn.target.peer_log().allow(peer.ip()) {
                    tracing::info!(%peer, "queue pair closed: authenticated, but the listener is at max_connections_per_listener");
                }
                break;
            }
            conn.admission.connected();
        }
        let ka_deadline = if conn.ctrlr.is_admin() && !authenticating {
            ctrl.as_ref().and_then(|c| c.keep_alive_deadline())
        } else {
            None
        };
        if !conn.tx.out.is_empty() {
            let ended = write_out(
                &mut conn,
                &mut wr,
                &mut w,
                ctrl.as_ref(),
                ka_deadline,
                &progress,
                &poller,
            )
            .await;
            if let Some(why) = ended {
                if conn.target.peer_log().allow(peer.ip()) {
                    tracing::info!(%peer, "queue pair ends: {why}");
                }
                break;
            }
        }
        if conn.ctrlr.auth_failed() && conn.tx.out.is_empty() {
            if conn.target.peer_log().allow(peer.ip()) {
                tracing::info!(%peer, "queue pair closed: its host failed DH-HMAC-CHAP authentication");
            }
            break;
        }
        match conn.state {
            ConnState::Terminating | ConnState::Closing => break,
            ConnState::Draining if conn.busy() == 0 && inflight.is_empty() => break,
            ConnState::HostClosed if inflight.is_empty() => break,
            _ => {}
        }
        let draining = conn.state == ConnState::Draining;
        let reading = conn.state != ConnState::HostClosed && !conn.is_parked();
        let h2c_deadline = conn.h2c_deadline(h2c_timeout);
        owed.set(h2c_deadline.is_some());
        let buffer_deadline = conn.buffer_deadline(h2c_timeout);
        grants.follow(&conn);
        let parked = conn
            .parked
            .as_ref()
            .map(|p| (p.released.clone(), p.since + 2 * w.drain_timeout));
        let events = conn.ctrlr.awaits_events().is_some();
        // A parked Connect waits for the host's old controller, with its
        // own bound.
        let unidentified = matches!(
            conn.state,
            ConnState::AwaitingIcReq | ConnState::AwaitingConnect
        ) && parked.is_none();
        let eviction = conn
            .admission
            .eviction()
            .filter(|_| unidentified || authenticating);
        tokio::select! {
            Some((slot, done)) = inflight.next(), if !inflight.is_empty() => {
                conn.finish(slot, done);
                while let Some(Some((slot, done))) = inflight.next().now_or_never() {
                    conn.finish(slot, done);
                }
                conn.start_waiting();
            }
            r = rd.read(conn.recv_dest(&mut rb)), if reading => {
                if !conn.received(r, &mut rb) {
                    break;
                }
            }
            _ = wait_torn_down(&mut w.teardown) => break,
            _ = until_true(&mut w.shutdown), if !draining => {
                conn.begin_drain();
                w.drain_deadline = Some(Instant::now() + w.drain_timeout);
            }
            _ = sleep_until(ka_deadline) => {
                if let Some(c) = &ctrl {
                    if c.keep_alive_deadline().is_some_and(|d| d <= Instant::now()) {
                        c.tear_down("keep-alive timeout");
                        break;
                    }
                }
            }
            _ = notified(ctrl.as_deref().filter(|_| events)) => {
                conn.ctrlr.deliver_events();
                conn.send_completions();
            }
            g = &mut grants.wait, if grants.key.is_some() => {
                // `grants.key` is the front of `waiting` (checked above).
                grants.clear();
                conn.buffer_granted(g);
            }
            _ = sleep_until(buffer_deadline) => conn.expire_waiting(h2c_timeout),
            _ = sleep_until(h2c_deadline) => conn.h2c_timed_out(h2c_deadline, h2c_timeout),
            ok = released(parked) => conn.unpark(ok, &mut rb),
            _ = sleep_until(w.drain_deadline) => break,
            _ = notified_opt(eviction.as_deref()) => {
                if conn.target.peer_log().allow(peer.ip()) {
                    tracing::info!(%peer, "socket closed before it identified (or authenticated) itself: the listener is at max_unidentified_per_listener and this socket was the oldest");
                }
                break;
            }
            _ = tokio::time::sleep_until(identify_deadline), if unidentified => {
                if conn.target.peer_log().allow(peer.ip()) {
                    tracing::info!(%peer, "socket closed: no ICReq and Connect within identify_timeout");
                }
                break;
            }
            _ = sleep_until(auth_deadline) => {
                if conn.target.peer_log().allow(peer.ip()) {
                    tracing::info!(%peer, "queue pair closed: no DH-HMAC-CHAP authentication within auth_timeout");
                }
                break;
            }
        }
    }
    drop(grants);
    let deadline = w
        .drain_deadline
        .unwrap_or_else(|| Instant::now() + w.drain_timeout);
    let abandoned = drain(&mut inflight, deadline).await;
    let ctrl = conn.ctrlr.unbind();
    let target = conn.target.clone();
    if abandoned > 0 {
        target.count_abandoned(abandoned);
        tracing::warn!(%peer, abandoned, "queue pair closed with commands still running on the bdev after the drain timeout; the controller is released once they end");
        tokio::spawn(async move {
            while inflight.next().await.is_some() {}
            if let Some(c) = ctrl {
                target.queue_closed(&c);
            }
        });
    } else if let Some(c) = ctrl {
        target.queue_closed(&c);
    }
}
