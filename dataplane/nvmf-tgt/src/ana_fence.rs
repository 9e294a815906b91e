//! The target-wide ANA fence: while it is up, every subsystem that
//! reports ANA states reports every group inaccessible through every
//! listener, so hosts send this server nothing and retry on another path
//! (I/O already here is refused with the path status, never a plain
//! error). It sits on top of the states the control plane set, which it
//! keeps: lifting it brings them back. The daemon raises it when its
//! lease from the control plane runs out (a server cut off from the
//! control plane cannot know whether a mirror took its volumes over), and
//! lifts it at the next renewal. Each transition is an ANA change for
//! every controller of those subsystems (a notice, as
//! [`Subsystem::set_ana_state`](crate::Subsystem::set_ana_state) sends).
//! Subsystems without ANA reporting are not affected.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::state::TargetState;

/// The fence's state in one word, read with the states of a listener:
/// how many times it was raised or lifted; odd while it is up.
#[derive(Debug, Default)]
pub(crate) struct AnaFence {
    transitions: AtomicU64,
}

impl AnaFence {
    /// Whether it is up, and its transitions so far.
    pub(crate) fn snapshot(&self) -> (bool, u64) {
        let t = self.transitions.load(Ordering::Acquire);
        (t % 2 == 1, t)
    }

    /// Raises or lifts it; whether that changed anything.
    fn set(&self, up: bool) -> bool {
        self.transitions
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (up != (t % 2 == 1)).then_some(t + 1)
            })
            .is_ok()
    }
}

/// Raises (`up`) or lifts the fence of `state`'s target; whether it
/// changed. Every subsystem reporting ANA states tells its controllers,
/// and its queues pick the new states up at their next command.
pub(crate) fn set(state: &TargetState, up: bool) -> bool {
    if !state.ana_fence().set(up) {
        return false;
    }
    // After the fence moved: a queue that sees a new generation reads the
    // fence as it is now. A subsystem created meanwhile reads it at its
    // queues' first command.
    let mut told = 0;
    for s in state.subsystems() {
        if !s.ana_reporting {
            continue;
        }
        s.ana_states_changed();
        for c in s.live_controllers() {
            c.ana_changed();
            told += 1;
        }
    }
    if up {
        tracing::warn!(
            controllers = told,
            "ANA fence raised: every ANA path reports inaccessible"
        );
    } else {
        tracing::info!(
            controllers = told,
            "ANA fence lifted: ANA paths report the states set"
        );
    }
    true
}
