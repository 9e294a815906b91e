//! Admin commands (queue 0): Identify, Get Log Page, Set/Get Features, Keep
//! Alive, Asynchronous Event Request, Abort. All complete synchronously
//! except AERs, which stay outstanding until an event or a shutdown.
//! Data for the host goes into the queue's reply buffer, reused.

use nvmf::cqe::{Cqe, Status};
use nvmf::sqe::{opcode, sgl, Sqe};

use super::identify::{self, cns, ControllerIdentity, ControllerType};
use super::log_page::{self, lid};
use super::{Outcome, Queue};
use crate::ana;

/// Feature identifiers served.
mod fid {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MANAGEMENT: u8 = 0x02;
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0b;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0f;
}

/// Outstanding AERs per controller (Identify AERL + 1).
const MAX_AERS: usize = 4;

/// Firmware revision reported in Identify.
const FIRMWARE: &str = env!("CARGO_PKG_VERSION");

/// Completes `cid` with `status` and no result.
fn complete(cid: u16, status: Status) -> Outcome {
    Outcome::Complete(Cqe::new(cid, status))
}

impl Queue {
    /// Admin commands; the controller must be enabled.
    pub(super) fn admin(&mut self, sqe: &Sqe) -> Outcome {
        let cid = sqe.cid();
        let Some(b) = &self.bound else {
            return complete(cid, Status::SEQUENCE_ERROR);
        };
        if !b.ctrl.is_ready() {
            return complete(cid, Status::SEQUENCE_ERROR);
        }
        match sqe.opcode() {
            opcode::IDENTIFY => self.identify(sqe),
            opcode::GET_LOG_PAGE => self.get_log_page(sqe),
            opcode::SET_FEATURES => self.set_features(sqe),
            opcode::GET_FEATURES => self.get_features(sqe),
            opcode::KEEP_ALIVE => {
                b.ctrl.keep_alive();
                complete(cid, Status::SUCCESS)
            }
            opcode::ASYNC_EVENT_REQUEST => {
                if self.aers.len() >= MAX_AERS {
                    return complete(cid, Status::AER_LIMIT_EXCEEDED);
                }
                self.aers.push(cid);
                self.deliver_events();
                Outcome::Deferred
            }
            // DW0 bit 0 set: the command was not aborted (they are
            // short-lived; hosts then wait for it to complete).
            opcode::ABORT => Outcome::Complete(Cqe {
                dw0: 1,
                ..Cqe::new(cid, Status::SUCCESS)
            }),
            _ => complete(cid, Status::INVALID_OPCODE),
        }
    }

    fn is_discovery(&self) -> bool {
        self.bound.as_ref().is_some_and(|b| b.sub.is_discovery)
    }

    /// Answers `sqe` with the first `len` bytes of `self.reply` (no more
    /// than the host's buffer holds), checking its data pointer.
    pub(super) fn reply_data(&mut self, sqe: &Sqe, len: usize) -> Outcome {
        let cid = sqe.cid();
        let d = sqe.sgl();
        if d.kind != sgl::TRANSPORT {
            return complete(cid, Status::SGL_TYPE_INVALID);
        }
        self.reply_len = len.min(d.length as usize);
        Outcome::Reply(Cqe::new(cid, Status::SUCCESS))
    }

    fn identify(&mut self, sqe: &Sqe) -> Outcome {
        let cid = sqe.cid();
        let cdw10 = sqe.cdw(10);
        let cns_value = (cdw10 & 0xff) as u8;
        let csi = (sqe.cdw(11) >> 24) as u8;
        let nsid = sqe.nsid();
        let Some(b) = &self.bound else {
            return complete(cid, Status::SEQUENCE_ERROR);
        };
        let sub = b.sub.clone();
        let cntlid = b.ctrl.cntlid;
        let mut page = std::mem::take(&mut self.reply);
        let result = if self.is_discovery() && cns_value != cns::CONTROLLER {
            Err(Status::INVALID_FIELD)
        } else {
            match cns_value {
                cns::CONTROLLER => {
                    let opts = self.target.opts();
                    identify::controller(
                        &mut page,
                        &ControllerIdentity {
                            serial: &sub.serial,
                            model: &sub.model,
                            firmware: FIRMWARE,
                            cntlid,
                            subnqn: &sub.nqn,
                            kind: if sub.is_discovery {
                                ControllerType::Discovery
                            } else {
                                ControllerType::Io
                            },
                            max_namespaces: sub.max_namespaces,
                            max_cmd: opts.max_queue_depth,
                            mdts: opts.mdts(),
                            in_capsule_data: opts.in_capsule_data_size,
                            kas_100ms: 1,
                            ana_reporting: sub.ana_reporting,
                        },
                    );
                    Ok(())
                }
                cns::NAMESPACE | cns::NS_DESCRIPTORS | cns::CS_NAMESPACE => {
                    if cns_value == cns::CS_NAMESPACE && csi != 0 {
                        Err(Status::INVALID_FIELD)
                    } else if nsid == u32::MAX && cns_value == cns::NAMESPACE {
                        // Capabilities common to all namespaces: none.
                        page[..identify::IDENTIFY_LEN].fill(0);
                        Ok(())
                    } else if nsid == 0 || nsid > sub.max_namespaces {
                        Err(Status::INVALID_NAMESPACE)
                    } else {
                        match (self.namespace(nsid), cns_value) {
                            (Some(ns), cns::NAMESPACE) => {
                                identify::namespace(&mut page, &ns, sub.ana_reporting);
                                Ok(())
                            }
                            (Some(ns), cns::NS_DESCRIPTORS) => {
                                identify::ns_descriptors(&mut page, &ns);
                                Ok(())
                            }
                            (Some(_), _) => {
                                page[..identify::IDENTIFY_LEN].fill(0);
                                Ok(())
                            }
                            // Inactive nsid: a zeroed structure (spec).
                            (None, cns::NAMESPACE) => {
                                page[..identify::IDENTIFY_LEN].fill(0);
                                Ok(())
                            }
                            (None, _) => Err(Status::INVALID_NAMESPACE),
                        }
                    }
                }
                cns::ACTIVE_NS_LIST => {
                    if nsid >= 0xffff_fffe {
                        Err(Status::INVALID_NAMESPACE)
                    } else {
                        let nss = self.namespaces();
                        identify::active_ns_list(&mut page, nsid, nss.keys());
                        Ok(())
                    }
                }
                cns::CS_CONTROLLER if csi == 0 => {
                    page[..identify::IDENTIFY_LEN].fill(0);
                    Ok(())
                }
                _ => Err(Status::INVALID_FIELD),
            }
        };
        self.reply = page;
        match result {
            Ok(()) => self.reply_data(sqe, identify::IDENTIFY_LEN),
            Err(st) => complete(cid, st),
        }
    }

    fn get_log_page(&mut self, sqe: &Sqe) -> Outcome {
        let cid = sqe.cid();
        let cdw10 = sqe.cdw(10);
        let log_id = (cdw10 & 0xff) as u8;
        let retain = cdw10 & (1 << 15) != 0;
        let numd = (u64::from(sqe.cdw(11) & 0xffff) << 16 | u64::from(cdw10 >> 16)) + 1;
        let len = (numd * 4) as usize;
        let offset = u64::from(sqe.cdw(12)) | (u64::from(sqe.cdw(13)) << 32);
        if offset % 4 != 0 || len > self.target.opts().max_io_size as usize {
            return complete(cid, Status::INVALID_FIELD);
        }
        let Some(b) = &self.bound else {
            return complete(cid, Status::SEQUENCE_ERROR);
        };
        let ctrl = b.ctrl.clone();
        let stats = b.stats.clone();
        let discovery = b.sub.is_discovery;
        let sub = b.sub.clone();
        let page = match (log_id, discovery) {
            (lid::DISCOVERY, true) => {
                let (genctr, entries) = self.target.discovery_entries(&ctrl.hostnqn);
                log_page::discovery_log(genctr, &entries)
            }
            (lid::ERROR, _) => vec![0u8; 64],
            (lid::SMART, false) => {
                log_page::smart(stats.read_bytes.get(), stats.written_bytes.get(), 0, 0)
            }
            (lid::FIRMWARE_SLOT, false) => vec![0u8; 512],
            (lid::CHANGED_NS_LIST, false) => {
                log_page::changed_ns_list(&ctrl.changed_namespaces(retain))
            }
            (lid::ANA, false) if sub.ana_reporting => {
                // LSP bit 0: Return Groups Only.
                let groups_only = cdw10 & (1 << 8) != 0;
                ctrl.ana_log_read(retain);
                let states = sub.ana_states(ctrl.admin_path.listen);
                ana::log_page(&states, &sub.ana_groups(), groups_only)
            }
            _ => return complete(cid, Status::INVALID_LOG_PAGE),
        };
        if self.reply.len() < len {
            self.reply.resize(len, 0);
        }
        log_page::slice_into(&mut self.reply[..len], &page, offset);
        self.reply_data(sqe, len)
    }

    fn set_features(&mut self, sqe: &Sqe) -> Outcome {
        let cid = sqe.cid();
        let feature = (sqe.cdw(10) & 0xff) as u8;
        let dw11 = sqe.cdw(11);
        let Some(b) = &self.bound else {
            return complete(cid, Status::SEQUENCE_ERROR);
        };
        let ctrl = b.ctrl.clone();
        let discovery = b.sub.is_discovery;
        let mut dw0 = 0;
        match feature {
            fid::NUMBER_OF_QUEUES if !discovery => {
                let (nsqr, ncqr) = (dw11 & 0xffff, dw11 >> 16);
                if nsqr == 0xffff || ncqr == 0xffff {
                    return complete(cid, Status::INVALID_FIELD);
                }
                let max = u32::from(self.target.opts().max_io_qpairs_per_ctrlr) - 1;
                let (sq, cq) = (nsqr.min(max), ncqr.min(max));
                ctrl.grant_io_queues(sq.min(cq) + 1);
                dw0 = sq | (cq << 16);
            }
            fid::KEEP_ALIVE_TIMER => ctrl.set_kato_ms(dw11),
            fid::ASYNC_EVENT_CONFIG => ctrl.set_aen_config(dw11),
            fid::VOLATILE_WRITE_CACHE if !discovery => ctrl.set_write_cache(dw11 & 1),
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::TEMPERATURE_THRESHOLD
            | fid::ERROR_RECOVERY
            | fid::INTERRUPT_COALESCING
                if !discovery => {}
            _ => return complete(cid, Status::INVALID_FIELD),
        }
        Outcome::Complete(Cqe {
            dw0,
            ..Cqe::new(cid, Status::SUCCESS)
        })
    }

    fn get_features(&mut self, sqe: &Sqe) -> Outcome {
        let cid = sqe.cid();
        let feature = (sqe.cdw(10) & 0xff) as u8;
        let Some(b) = &self.bound else {
            return complete(cid, Status::SEQUENCE_ERROR);
        };
        let ctrl = b.ctrl.clone();
        let discovery = b.sub.is_discovery;
        let dw0 = match feature {
            fid::NUMBER_OF_QUEUES if !discovery => {
                let n = ctrl.io_queues_granted().max(1) - 1;
                n | (n << 16)
            }
            fid::KEEP_ALIVE_TIMER => ctrl.kato_ms(),
            fid::ASYNC_EVENT_CONFIG => ctrl.aen_config(),
            fid::VOLATILE_WRITE_CACHE if !discovery => ctrl.write_cache(),
            // Warning threshold 70 C in Kelvin.
            fid::TEMPERATURE_THRESHOLD if !discovery => 343,
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::ERROR_RECOVERY
            | fid::INTERRUPT_COALESCING
                if !discovery =>
            {
                0
            }
            _ => return complete(cid, Status::INVALID_FIELD),
        };
        Outcome::Complete(Cqe {
            dw0,
            ..Cqe::new(cid, Status::SUCCESS)
        })
    }
}
