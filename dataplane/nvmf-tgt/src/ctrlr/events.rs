//! Asynchronous events: what a controller has to tell its host without
//! being asked (NVMe base specification, "Asynchronous Event Request"),
//! the configuration bits that enable each kind (feature 0x0B) and the
//! completion dword of each notice.

use std::collections::{BTreeSet, VecDeque};

/// Events the admin queue reports through Asynchronous Event Requests.
#[derive(Default)]
pub(super) struct AsyncEvents {
    /// CDW0 values of events not yet reported.
    pub(super) pending: VecDeque<u32>,
    /// Namespaces changed since the host last read the changed list.
    pub(super) changed_ns: BTreeSet<u32>,
    /// A namespace notice was reported and the log page not yet read:
    /// further changes are recorded but not reported (spec: masked).
    pub(super) ns_notice_masked: bool,
    /// The same for ANA change notices and the ANA log page.
    pub(super) ana_notice_masked: bool,
    /// Asynchronous Event Configuration (feature 0x0B).
    pub(super) config: u32,
}

/// AEN configuration bit: namespace attribute notices.
pub const AEN_CFG_NS_ATTRIBUTE: u32 = 1 << 8;

/// CDW0 of a "namespace attribute changed" notice: type notice (2), info
/// 0, log page 0x04.
pub const AEN_NS_CHANGED: u32 = 0x02 | (0x04 << 16);

/// AEN configuration bit: ANA change notices.
pub const AEN_CFG_ANA_CHANGE: u32 = 1 << 11;

/// CDW0 of an "asymmetric namespace access change" notice: type notice
/// (2), info 0x03, log page 0x0C.
pub const AEN_ANA_CHANGED: u32 = 0x02 | (0x03 << 8) | (0x0c << 16);

/// AEN configuration bit: discovery log page change notices.
pub const AEN_CFG_DISCOVERY_CHANGE: u32 = 1 << 31;

/// CDW0 of a "discovery log page changed" notice: type notice (2), info
/// 0xF0, log page 0x70.
pub const AEN_DISCOVERY_CHANGED: u32 = 0x02 | (0xf0 << 8) | (0x70 << 16);
