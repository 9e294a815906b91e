//! A subsystem's ANA states ([`crate::ana`]): each listener's state per
//! group, set by the control plane and told to the controllers that came
//! through that listener, and reported under the target's ANA fence
//! ([`crate::ana_fence`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::ana::{AnaState, ListenerAna};
use crate::subsystem::Subsystem;
use crate::TargetError;

impl Subsystem {
    /// The ANA states reported through listener `listen`: the states
    /// set, unless the target's ANA fence is up.
    pub fn ana_states(&self, listen: SocketAddr) -> Arc<ListenerAna> {
        let set = self.configured_ana_states(listen);
        match self.ana_fence.snapshot() {
            // Never fenced: the states set, as they are.
            (false, 0) => set,
            (fenced, transitions) => Arc::new(set.under_fence(fenced, transitions)),
        }
    }

    /// The ANA states the control plane set for listener `listen`, which
    /// the target's ANA fence hides while it is up.
    pub fn configured_ana_states(&self, listen: SocketAddr) -> Arc<ListenerAna> {
        self.ana
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&listen)
            .cloned()
            .unwrap_or_default()
    }

    /// The states reported changed: queues read them again at their next
    /// command.
    pub(crate) fn ana_states_changed(&self) {
        self.ana_generation.fetch_add(1, Ordering::Release);
    }

    /// Sets the state of ANA group `group` (every group, 1 to
    /// `max_namespaces`, when `None`) as listener `listen` reports it, and
    /// tells the controllers whose admin queue came through it (an ANA
    /// change notice). I/O through it follows at its next command.
    pub fn set_ana_state(
        &self,
        listen: SocketAddr,
        group: Option<u32>,
        state: AnaState,
    ) -> Result<(), TargetError> {
        if !self.ana_reporting {
            return Err(TargetError::InvalidArgument(format!(
                "subsystem {} does not report ANA states (create it with ana_reporting)",
                self.nqn
            )));
        }
        if let Some(g) = group {
            self.check_ana_group(g)?;
        }
        if !self.listeners().iter().any(|l| l.listen == listen) {
            return Err(TargetError::NotFound(format!("listener {listen}")));
        }
        let changed = {
            let mut all = self.ana.write().unwrap_or_else(|p| p.into_inner());
            let mut ana = all.get(&listen).map(|a| (**a).clone()).unwrap_or_default();
            let groups = match group {
                Some(g) => g..=g,
                None => 1..=self.max_namespaces,
            };
            let changed = ana.set(groups, state);
            all.insert(listen, Arc::new(ana));
            changed
        };
        if changed {
            self.ana_states_changed();
            tracing::info!(nqn = %self.nqn, %listen, ?group, state = state.name(), "ANA state changed");
            for c in self.live_controllers() {
                if c.admin_path.listen == listen {
                    c.ana_changed();
                }
            }
        }
        Ok(())
    }

    /// ANA group ids run from 1 to `max_namespaces`, as nsids do.
    pub(crate) fn check_ana_group(&self, group: u32) -> Result<(), TargetError> {
        if group == 0 || group > self.max_namespaces {
            return Err(TargetError::InvalidArgument(format!(
                "anagrpid {group} outside 1..={}",
                self.max_namespaces
            )));
        }
        Ok(())
    }

    /// Forgets a removed listener's states.
    pub(crate) fn forget_ana(&self, listen: SocketAddr) {
        self.ana
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&listen);
    }

    /// The nsids of each ANA group that has namespaces.
    pub fn ana_groups(&self) -> BTreeMap<u32, Vec<u32>> {
        let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for ns in self.namespaces().values() {
            groups.entry(ns.anagrpid).or_default().push(ns.nsid);
        }
        groups
    }
}
