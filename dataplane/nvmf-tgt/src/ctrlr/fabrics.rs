//! Fabrics commands: Connect (binding a queue to a new or existing
//! controller), Property Get/Set (the controller registers, CC transitions
//! included) and Disconnect.

use nvmf::auth;
use nvmf::cqe::{Cqe, Status};
use nvmf::sqe::{fctype, sgl, ConnectCmd, ConnectData, ConnectDataError, PropertyCmd, Sqe};

use super::controller::{prop, AuthState, CcTransition, NewController, RegisterError};
use super::{identify, status, Binding, Op, Outcome, Queue};

impl Queue {
    /// Fabrics commands after Connect. Before the queue authenticated,
    /// only authentication and Disconnect.
    pub(super) fn fabrics(&mut self, sqe: &Sqe, data: &[u8]) -> Outcome {
        let cid = sqe.cid();
        let admin = self.qid() == 0;
        match sqe.fctype() {
            fctype::AUTH_SEND => return self.auth_send(sqe, data),
            fctype::AUTH_RECV => return self.auth_recv(sqe),
            fctype::DISCONNECT => return Outcome::Disconnect(Cqe::new(cid, Status::SUCCESS)),
            _ if self.awaits_authentication() => return super::auth::required(cid),
            _ => {}
        }
        match sqe.fctype() {
            fctype::PROPERTY_GET if admin => self.property_get(sqe),
            fctype::PROPERTY_SET if admin => self.property_set(sqe),
            fctype::CONNECT => Outcome::Complete(Cqe::new(cid, Status::SEQUENCE_ERROR)),
            _ => Outcome::Complete(Cqe::new(cid, Status::INVALID_OPCODE)),
        }
    }

    fn property_get(&mut self, sqe: &Sqe) -> Outcome {
        let p = PropertyCmd::parse(sqe);
        let Some(b) = &self.bound else {
            return Outcome::Deferred;
        };
        let regs = b.ctrl.registers();
        let opts = self.target.opts();
        let value: u64 = match p.offset {
            prop::CAP => {
                let mqes = u64::from(opts.max_queue_depth - 1);
                // MQES, CQR (contiguous queues required), TO = 10 s (500 ms
                // units), CSS: NVM command set, MPSMIN = MPSMAX = 4 KiB.
                mqes | (1 << 16) | (20 << 24) | (1 << 37)
            }
            prop::VS => u64::from(identify::NVME_VERSION),
            prop::CC => u64::from(regs.cc),
            prop::CSTS => u64::from(regs.csts),
            prop::NSSR => 0,
            _ => return Outcome::Complete(Cqe::new(sqe.cid(), Status::INVALID_FIELD)),
        };
        let value = if p.eight_bytes {
            value
        } else {
            value & 0xffff_ffff
        };
        Outcome::Complete(Cqe {
            dw0: value as u32,
            dw1: (value >> 32) as u32,
            ..Cqe::new(sqe.cid(), Status::SUCCESS)
        })
    }

    fn property_set(&mut self, sqe: &Sqe) -> Outcome {
        let p = PropertyCmd::parse(sqe);
        let cid = sqe.cid();
        if p.offset != prop::CC {
            return Outcome::Complete(Cqe::new(cid, Status::INVALID_FIELD));
        }
        let Some(b) = &self.bound else {
            return Outcome::Deferred;
        };
        let done = Cqe::new(cid, Status::SUCCESS);
        match b.ctrl.write_cc(p.value as u32) {
            CcTransition::None | CcTransition::Enable => Outcome::Complete(done),
            CcTransition::Reset => {
                self.abort_aers();
                Outcome::Complete(done)
            }
            CcTransition::Shutdown => {
                let namespaces = self.namespaces();
                // As SPDK's target does: outstanding AERs are not answered
                // (the host has abandoned them before shutting down; an
                // answer now is a completion for a command it no longer
                // knows), they end with the admin queue.
                self.aers.clear();
                self.completions.push_back(done);
                Outcome::Background(Op::ShutdownFlush { namespaces })
            }
        }
    }

    /// Connect: parked while the host's previous controller drains, then
    /// accepted or refused.
    pub(super) fn connect(&mut self, sqe: &Sqe, data: &[u8]) -> Outcome {
        let cid = sqe.cid();
        if ConnectCmd::parse(sqe).qid == 0 {
            if let Ok(d) = ConnectData::parse(data) {
                if let Some(released) = self.target.releasing(&d.subnqn, &d.hostnqn) {
                    tracing::info!(peer = %self.path.peer, subnqn = %d.subnqn, hostnqn = %d.hostnqn, "Connect waits for the host's previous controller to drain");
                    return Outcome::Parked(released);
                }
            }
        }
        match self.try_connect(sqe, data) {
            Ok(cntlid) => {
                // AUTHREQ.ATR: the host authenticates before anything else.
                let atr = if self.awaits_authentication() {
                    auth::CONNECT_AUTHREQ_ATR
                } else {
                    0
                };
                Outcome::Connected(Cqe {
                    dw0: u32::from(cntlid) | atr,
                    ..Cqe::new(cid, Status::SUCCESS)
                })
            }
            Err((status, dw0)) => {
                if self.target.peer_log().allow(self.path.peer.ip()) {
                    tracing::info!(peer = %self.path.peer, sc = status.sc, dw0, "Connect refused");
                }
                Outcome::Complete(Cqe {
                    dw0,
                    ..Cqe::new(cid, status)
                })
            }
        }
    }

    /// Connect; on refusal, the status and CQE DW0 (for Invalid Parameters:
    /// the offset of the bad field, bit 16 set when it is in the data).
    fn try_connect(&mut self, sqe: &Sqe, data: &[u8]) -> Result<u16, (Status, u32)> {
        const IN_DATA: u32 = 1 << 16;
        let invalid = |at: u32| (Status::CONNECT_INVALID_PARAMETERS, at);
        let cmd = ConnectCmd::parse(sqe);
        let sgl_desc = sqe.sgl();
        if sgl_desc.kind != sgl::IN_CAPSULE || sgl_desc.address != 0 || data.len() < 1024 {
            return Err((Status::SGL_TYPE_INVALID, 0));
        }
        if cmd.recfmt != 0 {
            return Err((status::CONNECT_INCOMPATIBLE_FORMAT, 0));
        }
        let d = ConnectData::parse(data).map_err(|e| match e {
            ConnectDataError::TooShort => invalid(0),
            ConnectDataError::BadNqn(at) => invalid(IN_DATA | u32::from(at)),
        })?;
        let listen = self.path.listen;
        // A subsystem that does not exist (or is not reachable here) is
        // answered as a host it does not allow: the status must not tell
        // an unauthenticated party which subsystem NQNs exist (SPDK
        // answers Invalid Parameters). The log says which it was.
        let refused = (Status::CONNECT_INVALID_HOST, IN_DATA | 512);
        let Some(sub) = self
            .target
            .subsystem(&d.subnqn)
            .filter(|s| s.listens_on(listen))
        else {
            if self.target.peer_log().allow(self.path.peer.ip()) {
                tracing::info!(peer = %self.path.peer, subnqn = %d.subnqn, "Connect to a subsystem that does not exist or does not listen here (answered Connect Invalid Host)");
            }
            return Err(refused);
        };
        if !sub.host_allowed(&d.hostnqn) {
            if self.target.peer_log().allow(self.path.peer.ip()) {
                tracing::warn!(subnqn = %d.subnqn, hostnqn = %d.hostnqn, "host not allowed");
            }
            return Err(refused);
        }
        // A secure channel is bound to the host and subsystem of its PSK
        // identity; a host with a PSK comes only through one.
        if let Some(id) = &self.secure {
            if id.hostnqn != d.hostnqn || id.subnqn != d.subnqn {
                if self.target.peer_log().allow(self.path.peer.ip()) {
                    tracing::warn!(subnqn = %d.subnqn, hostnqn = %d.hostnqn, tls_hostnqn = %id.hostnqn, tls_subnqn = %id.subnqn, "Connect names another host or subsystem than the TLS PSK identity");
                }
                return Err(refused);
            }
        } else if sub.host_keys(&d.hostnqn).psk.is_some() {
            if self.target.peer_log().allow(self.path.peer.ip()) {
                tracing::warn!(subnqn = %d.subnqn, hostnqn = %d.hostnqn, "host has a TLS PSK but connected without TLS");
            }
            return Err(refused);
        }
        if sub.host_keys(&d.hostnqn).pending {
            if self.target.peer_log().allow(self.path.peer.ip()) {
                tracing::info!(subnqn = %d.subnqn, hostnqn = %d.hostnqn, "host's keys not delivered yet: Connect answered Controller Busy (the host retries)");
            }
            return Err((status::CONNECT_CONTROLLER_BUSY, 0));
        }
        let opts = self.target.opts();
        let max_entries = if cmd.qid == 0 {
            opts.max_aq_depth
        } else {
            opts.max_queue_depth
        };
        let min_sqsize = if cmd.qid == 0 { 31 } else { 1 };
        if cmd.sqsize < min_sqsize || u32::from(cmd.sqsize) + 1 > u32::from(max_entries) {
            return Err(invalid(44));
        }
        let ctrl = if cmd.qid == 0 {
            if d.cntlid != 0xffff {
                return Err(invalid(IN_DATA | 16));
            }
            let io_queues = if sub.is_discovery {
                0
            } else {
                u32::from(opts.max_io_qpairs_per_ctrlr)
            };
            let new = NewController {
                hostnqn: d.hostnqn.clone(),
                host_id: d.host_id,
                kato_ms: cmd.kato_ms,
                io_queues,
                admin_path: self.path,
            };
            let ctrl = sub.register_controller(listen, new).map_err(|e| match e {
                RegisterError::NotAllowed => refused,
                RegisterError::Unreachable => refused,
                RegisterError::Busy => (status::CONNECT_CONTROLLER_BUSY, 0),
            })?;
            ctrl.keep_alive();
            ctrl
        } else {
            if sub.is_discovery {
                return Err(invalid(42));
            }
            let ctrl = sub.controller(d.cntlid).ok_or(invalid(IN_DATA | 16))?;
            if ctrl.hostnqn != d.hostnqn {
                return Err(invalid(IN_DATA | 512));
            }
            if !ctrl.is_ready() {
                return Err((Status::SEQUENCE_ERROR, 0));
            }
            if u32::from(cmd.qid) > ctrl.io_queues_granted()
                || !sub.attach_io_queue(&ctrl, cmd.qid, self.path)
            {
                return Err(invalid(42));
            }
            ctrl
        };
        let cntlid = ctrl.cntlid;
        let stats = sub.stats.clone();
        // A host with a key authenticates every queue (an I/O queue joins
        // a controller whose admin queue already did: only an enabled
        // controller takes I/O queues, and enabling it took a Property Set
        // after authentication).
        let auth = if sub.is_discovery || !sub.host_keys(&d.hostnqn).required() {
            AuthState::Completed
        } else {
            AuthState::Negotiate
        };
        self.target.queue_opened(&ctrl);
        stats.connections_total.inc();
        stats.connections.add(1);
        tracing::debug!(peer = %self.path.peer, subnqn = %sub.nqn, cntlid, qid = cmd.qid, sqsize = cmd.sqsize, "queue connected");
        self.bound = Some(Binding {
            qid: cmd.qid,
            sqsize: cmd.sqsize,
            ctrl,
            sub,
            stats,
            auth,
        });
        if auth == AuthState::Negotiate {
            self.set_auth_state(AuthState::Negotiate);
        }
        Ok(cntlid)
    }
}
