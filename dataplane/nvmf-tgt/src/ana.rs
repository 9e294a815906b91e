//! Asymmetric Namespace Access (NVMe base specification 2.0, "Asymmetric
//! Namespace Access Reporting"): a subsystem exported by several servers
//! tells each host, per path, whether a namespace is best used there
//! (optimized), usable (non-optimized) or not at all. Each namespace is in
//! one ANA group; each listener reports a state per group, as SPDK keeps
//! it (`nvmf_subsystem_listener_set_ana_state`): a host's controller sees
//! the states of the listener its admin queue came through. Hosts read
//! them from the ANA log page, are told of changes by an Asynchronous
//! Event, and get a path error for I/O through an inaccessible path, on
//! which Linux's native multipath retries on another path.

use std::collections::BTreeMap;

use nvmf::cqe::Status;

/// Status code type of path related statuses.
const SCT_PATH: u8 = 0x3;

/// An ANA group's state through one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnaState {
    /// The best path: serve.
    Optimized,
    /// Serves, but another path is better.
    NonOptimized,
    /// Serves nothing now; the host should use another path.
    Inaccessible,
    /// Will serve nothing through this path again.
    PersistentLoss,
    /// Changing state (within ANATT): the host retries.
    Change,
}

impl AnaState {
    /// Every state, in the order of their codes.
    pub const ALL: [Self; 5] = [
        Self::Optimized,
        Self::NonOptimized,
        Self::Inaccessible,
        Self::PersistentLoss,
        Self::Change,
    ];

    /// The state's code in the ANA log page.
    pub fn code(self) -> u8 {
        match self {
            Self::Optimized => 0x01,
            Self::NonOptimized => 0x02,
            Self::Inaccessible => 0x03,
            Self::PersistentLoss => 0x04,
            Self::Change => 0x0f,
        }
    }

    /// SPDK's name (`nvmf_subsystem_listener_set_ana_state`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Optimized => "optimized",
            Self::NonOptimized => "non_optimized",
            Self::Inaccessible => "inaccessible",
            Self::PersistentLoss => "persistent_loss",
            Self::Change => "change",
        }
    }

    /// The state named `name` (SPDK's names).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The status of an I/O command to a namespace in this state, when it
    /// is refused: Asymmetric Access Persistent Loss, Inaccessible or
    /// Transition. Not DNR: a multipath host retries them on another path
    /// (Linux fails over on any path status without DNR).
    pub fn io_refusal(self) -> Option<Status> {
        let sc = match self {
            Self::Optimized | Self::NonOptimized => return None,
            Self::PersistentLoss => 0x01,
            Self::Inaccessible => 0x02,
            Self::Change => 0x03,
        };
        Some(Status {
            sct: SCT_PATH,
            sc,
            dnr: false,
        })
    }
}

/// The ANA states one listener reports: a state per group (a group not
/// listed is optimized, SPDK's default) and how many times they changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListenerAna {
    states: BTreeMap<u32, AnaState>,
    /// ANA log page change count: bumped on every change.
    pub change_count: u64,
    /// Under the target's ANA fence ([`crate::ana_fence`]): every group
    /// reads inaccessible, the states set kept underneath. Only in what
    /// [`ListenerAna::under_fence`] returns, never in the states set.
    fenced: bool,
}

impl ListenerAna {
    /// Group `group`'s state.
    pub fn state(&self, group: u32) -> AnaState {
        if self.fenced {
            return AnaState::Inaccessible;
        }
        self.states
            .get(&group)
            .copied()
            .unwrap_or(AnaState::Optimized)
    }

    /// These states as the listener reports them under the target's ANA
    /// fence: inaccessible throughout while `fenced`; the change count
    /// also counts the fence's `transitions`, so that it moves at each
    /// (and only goes up).
    pub fn under_fence(&self, fenced: bool, transitions: u64) -> Self {
        Self {
            states: self.states.clone(),
            change_count: self.change_count + transitions,
            fenced,
        }
    }

    /// Sets the state of `groups`; whether any changed (the change count
    /// then goes up).
    pub fn set(&mut self, groups: impl IntoIterator<Item = u32>, state: AnaState) -> bool {
        let mut changed = false;
        for g in groups {
            changed |= self.state(g) != state;
            if state == AnaState::Optimized {
                self.states.remove(&g);
            } else {
                self.states.insert(g, state);
            }
        }
        if changed {
            self.change_count += 1;
        }
        changed
    }
}

/// Length of the ANA log page header and of a group descriptor without
/// its nsid list.
const HEADER_LEN: usize = 16;
const DESCRIPTOR_LEN: usize = 32;

/// Builds the ANA log page (log identifier 0x0C) of `groups`: each ANA
/// group with its namespaces (ascending), in the states `ana` reports;
/// with `groups_only` (RGO) the descriptors carry no nsid lists.
pub fn log_page(ana: &ListenerAna, groups: &BTreeMap<u32, Vec<u32>>, groups_only: bool) -> Vec<u8> {
    let mut page = Vec::with_capacity(
        HEADER_LEN
            + groups.len() * DESCRIPTOR_LEN
            + groups.values().map(Vec::len).sum::<usize>() * 4,
    );
    page.extend_from_slice(&ana.change_count.to_le_bytes());
    page.extend_from_slice(&(groups.len() as u16).to_le_bytes());
    page.resize(HEADER_LEN, 0);
    for (&group, nsids) in groups {
        let listed = if groups_only { &[][..] } else { &nsids[..] };
        page.extend_from_slice(&group.to_le_bytes());
        page.extend_from_slice(&(listed.len() as u32).to_le_bytes());
        page.extend_from_slice(&ana.change_count.to_le_bytes());
        let start = page.len();
        page.push(ana.state(group).code());
        page.resize(start + 16, 0);
        for nsid in listed {
            page.extend_from_slice(&nsid.to_le_bytes());
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for s in AnaState::ALL {
            assert_eq!(AnaState::from_name(s.name()), Some(s));
        }
        assert_eq!(AnaState::from_name("optimised"), None);
        let codes: Vec<u8> = AnaState::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes, [1, 2, 3, 4, 15]);
    }

    #[test]
    fn only_serving_states_serve() {
        assert_eq!(AnaState::Optimized.io_refusal(), None);
        assert_eq!(AnaState::NonOptimized.io_refusal(), None);
        let st = AnaState::Inaccessible.io_refusal().unwrap();
        assert_eq!((st.sct, st.sc, st.dnr), (3, 2, false));
        assert_eq!(AnaState::PersistentLoss.io_refusal().unwrap().sc, 1);
        assert_eq!(AnaState::Change.io_refusal().unwrap().sc, 3);
    }

    #[test]
    fn a_change_is_counted_once_and_a_no_op_not_at_all() {
        let mut a = ListenerAna::default();
        assert_eq!(a.state(7), AnaState::Optimized);
        assert!(a.set([1, 2], AnaState::Inaccessible));
        assert_eq!(a.change_count, 1);
        assert!(!a.set([1], AnaState::Inaccessible), "already so");
        assert_eq!(a.change_count, 1);
        assert!(a.set([1], AnaState::Optimized));
        assert_eq!(
            (a.state(1), a.state(2)),
            (AnaState::Optimized, AnaState::Inaccessible)
        );
        assert_eq!(a.change_count, 2);
    }

    #[test]
    fn a_fence_hides_the_states_set_and_counts_as_changes() {
        let mut a = ListenerAna::default();
        a.set([2], AnaState::NonOptimized);
        let f = a.under_fence(true, 3);
        assert_eq!(
            (f.state(1), f.state(2)),
            (AnaState::Inaccessible, AnaState::Inaccessible)
        );
        assert_eq!(f.change_count, 4);
        let lifted = a.under_fence(false, 4);
        assert_eq!(
            (lifted.state(1), lifted.state(2)),
            (AnaState::Optimized, AnaState::NonOptimized),
            "the states set are back"
        );
        assert_eq!(lifted.change_count, 5);
        let groups = BTreeMap::from([(1, vec![1])]);
        assert_eq!(
            log_page(&f, &groups, true)[32],
            AnaState::Inaccessible.code()
        );
    }

    #[test]
    fn log_page_layout() {
        let mut a = ListenerAna::default();
        a.set([2], AnaState::NonOptimized);
        let groups = BTreeMap::from([(1, vec![1, 3]), (2, vec![2])]);
        let p = log_page(&a, &groups, false);
        assert_eq!(p.len(), 16 + 32 + 8 + 32 + 4);
        assert_eq!(
            u64::from_le_bytes(p[0..8].try_into().unwrap()),
            1,
            "change count"
        );
        assert_eq!(
            u16::from_le_bytes(p[8..10].try_into().unwrap()),
            2,
            "descriptors"
        );
        let d1 = &p[16..];
        assert_eq!(
            u32::from_le_bytes(d1[0..4].try_into().unwrap()),
            1,
            "ANAGRPID"
        );
        assert_eq!(
            u32::from_le_bytes(d1[4..8].try_into().unwrap()),
            2,
            "NNSIDS"
        );
        assert_eq!(u64::from_le_bytes(d1[8..16].try_into().unwrap()), 1);
        assert_eq!(d1[16], AnaState::Optimized.code());
        assert_eq!(u32::from_le_bytes(d1[32..36].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(d1[36..40].try_into().unwrap()), 3);
        let d2 = &p[16 + 40..];
        assert_eq!(u32::from_le_bytes(d2[0..4].try_into().unwrap()), 2);
        assert_eq!(d2[16], AnaState::NonOptimized.code());
        assert_eq!(u32::from_le_bytes(d2[32..36].try_into().unwrap()), 2);

        let rgo = log_page(&a, &groups, true);
        assert_eq!(rgo.len(), 16 + 2 * 32, "groups only: no nsid lists");
        assert_eq!(u32::from_le_bytes(rgo[20..24].try_into().unwrap()), 0);
    }
}
