//! One I/O queue kept up to `queue_depth` commands deep with the trace's
//! requests, in the trace's order. A request longer than the target's
//! largest transfer (MDTS) is split into consecutive commands, as a host's
//! block layer splits a bio; it completes when its last command does, and
//! its latency runs from its first command's submission to that.

use std::time::{Duration, Instant};

use nvmf::sqe::{opcode, sgl};

use nvmf_host::host::{Event, HostError, HostQueue};
use nvmf_host::wire;

use super::verify::{Expected, Tracker};

/// Counters of the measured requests (warm-up ones are not counted).
#[derive(Debug, Default)]
pub struct Counters {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub commands: u64,
    pub split_requests: u64,
    pub errors: u64,
    pub verified_blocks: u64,
    pub verify_errors: u64,
    pub first_verify_error: Option<String>,
    pub read_latency_ns: Vec<u32>,
    pub write_latency_ns: Vec<u32>,
}

/// Where commands go and how big they may be.
pub struct Limits {
    pub nsid: u32,
    pub lba_size: u32,
    pub max_transfer: u64,
    pub in_capsule_max: usize,
    pub queue_depth: usize,
}

struct Cmd {
    req: usize,
    write: bool,
    slba: u64,
    blocks: u64,
    len: usize,
    /// Read data, kept only when verifying.
    read_buf: Vec<u8>,
    expected: Option<Expected>,
}

struct Req {
    remaining: u32,
    failed: bool,
    started: Instant,
    write: bool,
    bytes: u64,
    measured: bool,
}

/// The queue and everything in flight on it.
pub struct Session {
    q: HostQueue,
    lim: Limits,
    /// Indexed by command id.
    cmds: Vec<Option<Cmd>>,
    free_cids: Vec<u16>,
    /// Write data per command id when verifying (stamps differ per write).
    bufs: Vec<Vec<u8>>,
    /// Write data otherwise.
    pattern: Vec<u8>,
    reqs: Vec<Option<Req>>,
    free_reqs: Vec<usize>,
    outstanding: usize,
    tracker: Option<Tracker>,
    /// Figures of the measured requests.
    pub counters: Counters,
}

impl Session {
    /// A session on the connected I/O queue `q`; `verify` stamps writes and
    /// checks reads.
    pub fn new(q: HostQueue, lim: Limits, verify: bool) -> Self {
        let qd = lim.queue_depth;
        Self {
            q,
            cmds: (0..qd).map(|_| None).collect(),
            free_cids: (0..qd as u16).rev().collect(),
            bufs: if verify {
                vec![Vec::new(); qd]
            } else {
                Vec::new()
            },
            pattern: (0..lim.max_transfer as usize)
                .map(|i| (i as u8).wrapping_mul(13))
                .collect(),
            reqs: Vec::new(),
            free_reqs: Vec::new(),
            outstanding: 0,
            tracker: verify.then(|| Tracker::new(lim.lba_size)),
            lim,
            counters: Counters::default(),
        }
    }

    /// Sends a request of `len` bytes at byte `offset` (both multiples of
    /// the LBA size), waiting for free command slots as needed.
    pub fn submit(
        &mut self,
        write: bool,
        offset: u64,
        len: u64,
        measured: bool,
    ) -> Result<(), HostError> {
        let lba = u64::from(self.lim.lba_size);
        let per_cmd = self.lim.max_transfer / lba;
        let (slba, blocks) = (offset / lba, len / lba);
        let pieces = blocks.div_ceil(per_cmd);
        let req = Req {
            remaining: pieces as u32,
            failed: false,
            started: Instant::now(),
            write,
            bytes: len,
            measured,
        };
        let ri = match self.free_reqs.pop() {
            Some(i) => {
                self.reqs[i] = Some(req);
                i
            }
            None => {
                self.reqs.push(Some(req));
                self.reqs.len() - 1
            }
        };
        if measured {
            self.counters.commands += pieces;
            self.counters.split_requests += u64::from(pieces > 1);
        }
        let mut at = 0;
        while at < blocks {
            let n = per_cmd.min(blocks - at);
            let cid = loop {
                if let Some(c) = self.free_cids.pop() {
                    break c;
                }
                self.poll(None)?;
            };
            self.send(cid, ri, write, slba + at, n);
            at += n;
        }
        self.q.flush()
    }

    fn send(&mut self, cid: u16, req: usize, write: bool, slba: u64, blocks: u64) {
        let len = (blocks * u64::from(self.lim.lba_size)) as usize;
        let mut cmd = Cmd {
            req,
            write,
            slba,
            blocks,
            len,
            read_buf: Vec::new(),
            expected: None,
        };
        if let Some(t) = self.tracker.as_mut() {
            if write {
                let buf = &mut self.bufs[cid as usize];
                buf.resize(len, 0);
                t.write_sent(slba, buf);
            } else {
                cmd.read_buf = vec![0; len];
                cmd.expected = Some(t.read_sent(slba, blocks));
            }
        }
        let in_capsule = write && len <= self.lim.in_capsule_max;
        let (op, kind) = match (write, in_capsule) {
            (false, _) => (opcode::READ, sgl::TRANSPORT),
            (true, false) => (opcode::WRITE, sgl::TRANSPORT),
            (true, true) => (opcode::WRITE, sgl::IN_CAPSULE),
        };
        let sqe = wire::rw(
            op,
            cid,
            self.lim.nsid,
            slba,
            len,
            self.lim.lba_size as usize,
            kind,
        );
        let data: Option<&[u8]> = match (in_capsule, self.tracker.is_some()) {
            (false, _) => None,
            (true, true) => Some(&self.bufs[cid as usize][..len]),
            (true, false) => Some(&self.pattern[..len]),
        };
        self.q.queue_command(&sqe, data);
        self.cmds[cid as usize] = Some(cmd);
        self.outstanding += 1;
    }

    /// Sends what is queued and handles one event, waiting at most `wait`
    /// (`None`: until one comes). Returns whether one came.
    fn poll(&mut self, wait: Option<Duration>) -> Result<bool, HostError> {
        self.q.flush()?;
        let ev = match wait {
            Some(w) => match self.q.recv_timeout(w)? {
                Some(e) => e,
                None => return Ok(false),
            },
            None => self.q.recv()?,
        };
        match ev {
            Event::Completion(c) => self.complete(c.cid, c.status.is_success())?,
            Event::Data {
                cccid,
                datao,
                data: n,
                success,
            } => {
                let cmd = self.cmd(cccid)?;
                if !cmd.read_buf.is_empty() {
                    let end = datao as usize + n;
                    if end > cmd.read_buf.len() {
                        return Err(HostError::Protocol(format!(
                            "C2HData beyond command {cccid}'s {} bytes",
                            cmd.len
                        )));
                    }
                    let data = self.q.last_data(n);
                    let cmd = self.cmds[cccid as usize].as_mut().expect("checked");
                    cmd.read_buf[datao as usize..end].copy_from_slice(data);
                }
                if success {
                    self.complete(cccid, true)?;
                }
            }
            Event::R2t(r) => {
                let len = self.cmd(r.cccid)?.len;
                let data = if self.tracker.is_some() {
                    &self.bufs[r.cccid as usize][..]
                } else {
                    &self.pattern[..len]
                };
                let (off, n) = (r.r2to as usize, r.r2tl as usize);
                if off + n > data.len() {
                    return Err(HostError::Protocol(format!(
                        "R2T beyond command {}'s {len} bytes",
                        r.cccid
                    )));
                }
                let chunk = self.q.maxh2cdata.max(4096) as usize;
                let mut done = 0;
                while done < n {
                    let k = chunk.min(n - done);
                    let d = &data[off + done..off + done + k];
                    self.q
                        .queue_h2c(r.cccid, r.ttag, (off + done) as u32, d, done + k == n);
                    done += k;
                }
            }
        }
        Ok(true)
    }

    fn cmd(&self, cid: u16) -> Result<&Cmd, HostError> {
        self.cmds
            .get(cid as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| HostError::Protocol(format!("event for unknown command {cid}")))
    }

    fn complete(&mut self, cid: u16, ok: bool) -> Result<(), HostError> {
        self.cmd(cid)?;
        let cmd = self.cmds[cid as usize].take().expect("checked");
        self.free_cids.push(cid);
        self.outstanding -= 1;
        let now = Instant::now();
        let measured = self.reqs[cmd.req].as_ref().is_some_and(|r| r.measured);
        if let Some(t) = self.tracker.as_mut() {
            if cmd.write {
                t.write_done(cmd.slba, cmd.blocks, ok);
            } else if let (true, Some(want)) = (ok, &cmd.expected) {
                match t.check(cmd.slba, want, &cmd.read_buf) {
                    Ok(n) => self.counters.verified_blocks += n,
                    Err(e) => {
                        self.counters.verify_errors += 1;
                        self.counters.first_verify_error.get_or_insert(e);
                    }
                }
            }
        }
        let req = self.reqs[cmd.req].as_mut().expect("a command's request");
        req.failed |= !ok;
        req.remaining -= 1;
        if req.remaining > 0 {
            return Ok(());
        }
        let req = self.reqs[cmd.req].take().expect("present");
        self.free_reqs.push(cmd.req);
        if !measured {
            return Ok(());
        }
        let c = &mut self.counters;
        let ns = now
            .duration_since(req.started)
            .as_nanos()
            .min(u32::MAX as u128) as u32;
        if req.failed {
            c.errors += 1;
        } else if req.write {
            c.write_bytes += req.bytes;
        } else {
            c.read_bytes += req.bytes;
        }
        if req.write {
            c.writes += 1;
            c.write_latency_ns.push(ns);
        } else {
            c.reads += 1;
            c.read_latency_ns.push(ns);
        }
        Ok(())
    }

    /// Handles completions until nothing is in flight.
    pub fn drain(&mut self) -> Result<(), HostError> {
        while self.outstanding > 0 {
            self.poll(None)?;
        }
        self.q.flush()
    }

    /// Handles completions until `deadline` (sleeps when nothing is in
    /// flight).
    pub fn wait_until(&mut self, deadline: Instant) -> Result<(), HostError> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            if self.outstanding > 0 {
                self.poll(Some(deadline - now))?;
            } else {
                std::thread::sleep(deadline - now);
            }
        }
    }
}
