//! A gate: operations that reach it wait until the test opens it, and the
//! test can wait until a given number of them arrived. This is what orders
//! a crash test's events: the test acts once an operation is known to be
//! held, never after a guessed delay.

use std::time::Duration;

use tokio::sync::watch;

/// How long [`Gate::reached`] waits before it fails the test. Under a
/// paused clock this is virtual time: it passes at once when nothing else
/// can run, so a missing operation fails the test without a real wait.
const REACH_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, Default)]
struct State {
    open: bool,
    /// Operations waiting at the gate now.
    held: usize,
}

/// Holds the operations it is installed for until [`Gate::open`].
#[derive(Debug)]
pub struct Gate {
    what: &'static str,
    state: watch::Sender<State>,
}

impl Gate {
    /// A closed gate; `what` names the operations it holds in messages.
    pub fn closed(what: &'static str) -> Gate {
        Gate {
            what,
            state: watch::channel(State::default()).0,
        }
    }

    /// Operations waiting at the gate now.
    pub fn held(&self) -> usize {
        self.state.borrow().held
    }

    /// Waits until `n` operations are held; fails the test when they never
    /// come.
    pub async fn reached(&self, n: usize) {
        let mut rx = self.state.subscribe();
        let got = tokio::time::timeout(REACH_TIMEOUT, rx.wait_for(|s| s.held >= n)).await;
        assert!(
            got.is_ok(),
            "only {} of the {n} expected {} reached the gate",
            self.held(),
            self.what
        );
    }

    /// Lets every held operation go on, and every later one through.
    pub fn open(&self) {
        self.state.send_modify(|s| s.open = true);
    }

    /// Called by the device for an operation the gate is installed for:
    /// returns at once when open, else when opened.
    pub async fn pass(&self) {
        let mut rx = self.state.subscribe();
        let held = self.state.send_if_modified(|s| {
            if s.open {
                return false;
            }
            s.held += 1;
            true
        });
        if !held {
            return;
        }
        // The sender lives as long as the gate, which the caller borrows.
        let _ = rx.wait_for(|s| s.open).await;
        self.state.send_modify(|s| s.held -= 1);
    }
}
