//! The owner's connection to its mirror: a [`Replica`] over NVMe/TCP, with
//! nvmf-host as the initiator (authenticated with DH-HMAC-CHAP when the
//! mirror's replication subsystem asks for it). Writes, deallocates and
//! flushes are the standard commands; a clean mark is the vendor-specific
//! command `MARK_CLEAN` (opcode 0x80, SLBA and NLB as a Write's).
//!
//! One I/O queue, driven by a task on a thread of its own (a current-thread
//! runtime), so that the queue's socket is polled without blocking the
//! daemon's runtime. Commands are pipelined up to the queue depth; large
//! writes are sent as the target asks (R2T). The first error or an answer
//! later than [`IO_TIMEOUT`] ends the connection: every operation then fails
//! at once, and the volume holds its writes' answers until the control
//! plane drops or replaces the mirror (see `cache::volume::replica`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bdev::{BoxFuture, DmaBuf};
use cache::volume::replica::{Replica, ReplicaError};
use nvmf::sqe::{opcode, sgl, SglDescriptor, Sqe};
use nvmf_host::auth::DhchapKeys;
use nvmf_host::host::{ConnectParams, Event, HostController, HostQueue};
use nvmf_host::wire;
use tokio::io::unix::AsyncFd;
use tokio::io::{Interest, Ready};
use tokio::sync::{mpsc, oneshot};

/// An operation not answered for this long ends the connection. Long
/// enough for a loaded server to answer; a mirror that is gone is dropped
/// by the control plane on its own timing anyway (which releases what
/// waits for it), this only makes the owner report it `broken`.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The admin queue's keep-alive timeout, sent with Connect; a keep-alive
/// goes every third of it.
const KATO: Duration = Duration::from_secs(6);
/// Most blocks one MARK_CLEAN names (its NLB, 0's based, has 16 bits).
const MAX_MARK_BLOCKS: u64 = 1 << 16;
/// How long a receive spins for the rest of a PDU that arrived in part.
const PARTIAL_PDU_SPIN: Duration = Duration::from_micros(500);
/// The data pointer of a command that moves none.
const NO_DATA: SglDescriptor = SglDescriptor {
    address: 0,
    length: 0,
    kind: sgl::TRANSPORT,
};
/// Commands in flight at most (the queue holds one more).
const QUEUE_DEPTH: usize = 127;

/// Where the mirror's replication subsystem is.
#[derive(Clone, Debug)]
pub struct MirrorTarget {
    /// `host:port` of its listener.
    pub addr: String,
    /// The replication subsystem's NQN.
    pub subnqn: String,
    /// This server's host NQN, as the mirror allows it.
    pub hostnqn: String,
    /// The namespace holding the mirror's copy.
    pub nsid: u32,
}

enum Kind {
    Write {
        offset: u64,
        data: DmaBuf,
        fua: bool,
    },
    Deallocate {
        offset: u64,
        len: u64,
    },
    MarkClean {
        offset: u64,
        len: u64,
    },
    Flush,
    /// Ends the connection (its keep-alive failed).
    Fail(String),
}

struct Op {
    kind: Kind,
    done: oneshot::Sender<Result<(), ReplicaError>>,
}

/// A connected mirror.
pub struct NvmfReplica {
    target: MirrorTarget,
    tx: mpsc::UnboundedSender<Op>,
    /// The namespace's block size.
    lba: u64,
}

/// A mirror connected, its connection not started yet.
pub struct Connected {
    target: MirrorTarget,
    io: HostQueue,
    admin: HostQueue,
    conn: Connection,
}

impl NvmfReplica {
    /// Connects (admin and one I/O queue, authenticating with `keys` when
    /// asked) and checks that the namespace matches `volume_size` and
    /// `block_size`. Blocking: call it off the runtime, then
    /// [`Connected::start`] on it.
    pub fn connect(
        target: MirrorTarget,
        keys: Option<DhchapKeys>,
        volume_size: u64,
        block_size: u32,
    ) -> Result<Connected, String> {
        let what = format!("connecting to mirror {} at {}", target.subnqn, target.addr);
        let p = ConnectParams {
            addr: target.addr.clone(),
            subnqn: target.subnqn.clone(),
            hostnqn: target.hostnqn.clone(),
            host_id: host_id(&target.hostnqn),
            queue_size: QUEUE_DEPTH as u16 + 1,
            kato_ms: KATO.as_millis() as u32,
        };
        let mut c = HostController::connect_with_keys(&p, 1, keys.as_ref())
            .map_err(|e| format!("{what}: {e}"))?;
        let (nsze, lba) =
            namespace_geometry(&mut c.admin, target.nsid).map_err(|e| format!("{what}: {e}"))?;
        if lba != block_size || nsze * u64::from(lba) != volume_size {
            return Err(format!(
                "{what}: namespace {} is {} blocks of {lba} bytes, the volume {volume_size} bytes of {block_size}",
                target.nsid, nsze
            ));
        }
        let in_capsule = in_capsule_max(&mut c.admin).map_err(|e| format!("{what}: {e}"))?;
        let mut io =
            c.io.pop()
                .ok_or_else(|| format!("{what}: no I/O queue granted"))?;
        // Non-blocking: the task waits for readiness, and spins at most
        // this long for the rest of a PDU received in part.
        io.set_busy_poll(true).map_err(|e| format!("{what}: {e}"))?;
        io.set_read_timeout(PARTIAL_PDU_SPIN)
            .map_err(|e| format!("{what}: {e}"))?;
        c.admin
            .set_read_timeout(IO_TIMEOUT)
            .map_err(|e| format!("{what}: {e}"))?;
        let conn = Connection {
            nsid: target.nsid,
            lba: u64::from(lba),
            in_capsule,
            inflight: HashMap::new(),
        };
        Ok(Connected {
            target,
            io,
            admin: c.admin,
            conn,
        })
    }

    fn submit(&self, kind: Kind) -> BoxFuture<'static, Result<(), ReplicaError>> {
        let (done, rx) = oneshot::channel();
        let sent = self.tx.send(Op { kind, done });
        let target = self.describe();
        Box::pin(async move {
            if sent.is_err() {
                return Err(format!("the connection to mirror {target} has ended"));
            }
            rx.await
                .unwrap_or_else(|_| Err(format!("the connection to mirror {target} has ended")))
        })
    }
}

impl Connected {
    /// Starts the connection: its task on the current runtime (the
    /// owner's, so that forwarding costs no thread switch), and the admin
    /// queue's keep-alives on a thread of their own.
    pub fn start(self) -> NvmfReplica {
        let Connected {
            target,
            io,
            admin,
            conn,
        } = self;
        let (tx, rx) = mpsc::unbounded_channel();
        let name = target.subnqn.clone();
        let lba = conn.lba;
        tokio::spawn(async move {
            if let Err(e) = conn.run(io, rx).await {
                tracing::error!(mirror = %name, error = %e, "connection to the mirror ended");
            }
        });
        let weak = tx.downgrade();
        let _ = std::thread::Builder::new()
            .name("mirror-keepalive".into())
            .spawn(move || keep_alive(admin, weak));
        NvmfReplica { target, tx, lba }
    }
}

/// Sends a Keep Alive every third of [`KATO`] until the replica is
/// dropped; a failure ends the connection.
fn keep_alive(mut admin: HostQueue, tx: mpsc::WeakUnboundedSender<Op>) {
    loop {
        std::thread::sleep(KATO / 3);
        let Some(tx) = tx.upgrade() else { return };
        if let Err(e) = admin.keep_alive() {
            let (done, _) = oneshot::channel();
            let _ = tx.send(Op {
                kind: Kind::Fail(format!("keep-alive to the mirror: {e}")),
                done,
            });
            return;
        }
    }
}

impl Replica for NvmfReplica {
    fn write(
        &self,
        offset: u64,
        data: DmaBuf,
        fua: bool,
    ) -> BoxFuture<'static, Result<(), ReplicaError>> {
        self.submit(Kind::Write { offset, data, fua })
    }
    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'static, Result<(), ReplicaError>> {
        self.submit(Kind::Deallocate { offset, len })
    }
    /// In commands of at most [`MAX_MARK_BLOCKS`] (NLB has 16 bits), all
    /// sent at once.
    fn mark_clean(&self, offset: u64, len: u64) -> BoxFuture<'static, Result<(), ReplicaError>> {
        let step = MAX_MARK_BLOCKS * self.lba;
        let marks: Vec<_> = (offset..offset + len)
            .step_by(step as usize)
            .map(|o| {
                self.submit(Kind::MarkClean {
                    offset: o,
                    len: step.min(offset + len - o),
                })
            })
            .collect();
        Box::pin(async move {
            for m in marks {
                m.await?;
            }
            Ok(())
        })
    }
    fn flush(&self) -> BoxFuture<'static, Result<(), ReplicaError>> {
        self.submit(Kind::Flush)
    }
    fn describe(&self) -> String {
        format!("{}@{}", self.target.subnqn, self.target.addr)
    }
}

/// A host identifier of this server's host NQN (the first 16 bytes of its
/// SHA-256): the same on every connection, as a kernel host's hostid is.
fn host_id(hostnqn: &str) -> [u8; 16] {
    let d = ring::digest::digest(&ring::digest::SHA256, hostnqn.as_bytes());
    d.as_ref()[..16].try_into().expect("16 bytes")
}

/// The namespace's size in blocks and its block size (Identify Namespace:
/// NSZE, and LBADS of the format FLBAS selects).
fn namespace_geometry(admin: &mut HostQueue, nsid: u32) -> Result<(u64, u32), String> {
    let id = admin.identify(0x00, nsid).map_err(|e| e.to_string())?;
    let nsze = u64::from_le_bytes(id[0..8].try_into().expect("8 bytes"));
    let format = usize::from(id[26] & 0x0f);
    let lbads = id[128 + 4 * format + 2];
    if nsze == 0 || !(9..=16).contains(&lbads) {
        return Err(format!("namespace {nsid} is not active on the mirror"));
    }
    Ok((nsze, 1 << lbads))
}

/// The largest write sent in the command capsule (Identify Controller:
/// IOCCSZ, in 16-byte units, less the 64-byte command).
fn in_capsule_max(admin: &mut HostQueue) -> Result<usize, String> {
    let id = admin.identify(0x01, 0).map_err(|e| e.to_string())?;
    let ioccsz = u32::from_le_bytes(id[1792..1796].try_into().expect("4 bytes"));
    Ok((ioccsz as usize * 16).saturating_sub(64))
}

/// A command sent and not answered: its write data (for R2Ts), when it
/// went, and who waits.
struct Sent {
    data: Option<DmaBuf>,
    at: Instant,
    done: oneshot::Sender<Result<(), ReplicaError>>,
}

struct Connection {
    nsid: u32,
    lba: u64,
    in_capsule: usize,
    inflight: HashMap<u16, Sent>,
}

impl Connection {
    async fn run(
        mut self,
        io: HostQueue,
        mut rx: mpsc::UnboundedReceiver<Op>,
    ) -> Result<(), String> {
        // SAFETY: the queue owns its socket for its whole life, and its
        // `as_raw_fd` always names that socket.
        let mut io = unsafe { AsyncFd::register(io) }.map_err(|e| e.to_string())?;
        // Bytes queued that the socket did not take yet.
        let mut unsent = false;
        let r = loop {
            let oldest = self.inflight.values().map(|s| s.at).min();
            let deadline =
                tokio::time::Instant::from_std(oldest.unwrap_or_else(Instant::now) + IO_TIMEOUT);
            tokio::select! {
                op = rx.recv(), if self.inflight.len() < QUEUE_DEPTH && !unsent => {
                    let Some(op) = op else { break Ok(()) };
                    let q = io.get_mut();
                    let mut next = Some(op);
                    let mut failed = None;
                    while let Some(op) = next.take() {
                        if let Kind::Fail(e) = op.kind {
                            failed = Some(e);
                            break;
                        }
                        self.send(q, op);
                        if self.inflight.len() < QUEUE_DEPTH {
                            next = rx.try_recv().ok();
                        }
                    }
                    if let Some(e) = failed {
                        break Err(e);
                    }
                    match q.try_flush() {
                        Ok(all) => unsent = !all,
                        Err(e) => break Err(format!("sending to the mirror: {e}")),
                    }
                }
                ready = io.ready_mut(if unsent { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE }) => {
                    let mut guard = ready.map_err(|e| e.to_string())?;
                    let readiness = guard.ready();
                    let q = guard.get_inner_mut();
                    // Everything the socket holds (one wake-up for a burst
                    // of completions), then wait again.
                    let mut r = Ok(());
                    while readiness.is_readable() {
                        match q.recv() {
                            Ok(ev) => {
                                if let Err(e) = self.handle(q, ev) {
                                    r = Err(e);
                                    break;
                                }
                                if !q.pdu_buffered() && !q.readable_now() {
                                    break;
                                }
                            }
                            Err(nvmf_host::host::HostError::Io(e))
                                if e.kind() == std::io::ErrorKind::WouldBlock =>
                            {
                                break;
                            }
                            Err(e) => {
                                r = Err(format!("receiving from the mirror: {e}"));
                                break;
                            }
                        }
                    }
                    // What is queued (data an R2T asked for, commands the
                    // socket did not take) goes as the socket takes it.
                    let r = r.and_then(|()| {
                        q.try_flush().map_err(|e| format!("sending to the mirror: {e}"))
                    });
                    match r {
                        Ok(all) => unsent = !all,
                        Err(e) => break Err(e),
                    }
                    // Only what was seen and used up: a readiness of the
                    // other kind may have come with it.
                    let mut drained = Ready::EMPTY;
                    if readiness.is_readable() {
                        drained |= Ready::READABLE;
                    }
                    if readiness.is_writable() && unsent {
                        drained |= Ready::WRITABLE;
                    }
                    guard.clear_ready_matching(drained);
                }
                _ = tokio::time::sleep_until(deadline), if oldest.is_some() => {
                    break Err(format!("the mirror answered nothing for {IO_TIMEOUT:?}"));
                }
            }
        };
        // Whatever ends the connection fails every operation it holds, and
        // (the receiver dropped) every later one.
        let why = match &r {
            Ok(()) => "the mirror was dropped".to_string(),
            Err(e) => e.clone(),
        };
        for (_, s) in self.inflight.drain() {
            let _ = s.done.send(Err(why.clone()));
        }
        r
    }

    fn send(&mut self, q: &mut HostQueue, op: Op) {
        let cid = q.cid();
        let (sqe, capsule, data) = match op.kind {
            Kind::Write { offset, data, fua } => {
                let kind = if data.len() <= self.in_capsule {
                    sgl::IN_CAPSULE
                } else {
                    sgl::TRANSPORT
                };
                let mut sqe = wire::rw(
                    opcode::WRITE,
                    cid,
                    self.nsid,
                    offset / self.lba,
                    data.len(),
                    self.lba as usize,
                    kind,
                );
                if fua {
                    sqe.0[51] |= 0x40; // CDW12 bit 30: FUA
                }
                (sqe, kind == sgl::IN_CAPSULE, Some(data))
            }
            Kind::Deallocate { offset, len } => {
                let (sqe, list) = wire::deallocate(
                    cid,
                    self.nsid,
                    &[(offset / self.lba, (len / self.lba) as u32)],
                );
                (sqe, true, Some(DmaBuf::from_slice(&list)))
            }
            Kind::MarkClean { offset, len } => {
                let nlb = (len / self.lba).saturating_sub(1) as u32;
                let slba = offset / self.lba;
                let sqe = Sqe::build(
                    opcode::MARK_CLEAN,
                    cid,
                    self.nsid,
                    NO_DATA,
                    [slba as u32, (slba >> 32) as u32, nlb, 0, 0, 0],
                );
                (sqe, false, None)
            }
            Kind::Fail(_) => return,
            Kind::Flush => (
                Sqe::build(opcode::FLUSH, cid, self.nsid, NO_DATA, [0; 6]),
                false,
                None,
            ),
        };
        q.queue_command(&sqe, if capsule { data.as_deref() } else { None });
        self.inflight.insert(
            cid,
            Sent {
                data,
                at: Instant::now(),
                done: op.done,
            },
        );
    }

    fn handle(&mut self, q: &mut HostQueue, ev: Event) -> Result<(), String> {
        match ev {
            Event::Completion(c) => {
                let s = self
                    .inflight
                    .remove(&c.cid)
                    .ok_or_else(|| format!("the mirror answered unknown command {}", c.cid))?;
                let r = match c.status.is_success() {
                    true => Ok(()),
                    false => Err(format!("the mirror refused a command: {:?}", c.status)),
                };
                let failed = r.is_err();
                let _ = s.done.send(r.clone());
                // A refusal is as final as a lost connection: the mirror's
                // copy now lacks a write.
                if failed {
                    return r;
                }
                Ok(())
            }
            Event::R2t(r) => {
                let s = self.inflight.get(&r.cccid).ok_or_else(|| {
                    format!("the mirror asked for data of unknown command {}", r.cccid)
                })?;
                let data = s.data.as_deref().unwrap_or(&[]);
                let (off, len) = (r.r2to as usize, r.r2tl as usize);
                if off + len > data.len() {
                    return Err("the mirror asked for data beyond the write".into());
                }
                let chunk = q.maxh2cdata.max(4096) as usize;
                let mut done = 0;
                while done < len {
                    let n = chunk.min(len - done);
                    let d = &data[off + done..off + done + n];
                    q.queue_h2c(r.cccid, r.ttag, (off + done) as u32, d, done + n == len);
                    done += n;
                }
                Ok(())
            }
            Event::Data { .. } => Err("the mirror sent data for a command that reads none".into()),
        }
    }
}
