//! Busy polling: keeping the runtime's threads awake between I/Os.
//!
//! In interrupt mode a runtime thread with nothing to do sleeps in
//! `epoll_wait`, and the next PDU pays for the wake-up: at queue depth 1
//! that is most of a round trip. SPDK's reactors never sleep; ours may
//! spin in the same way, always or for a window after the last activity,
//! so that an idle server still sleeps.
//!
//! The spinner is a task that yields to the scheduler in a loop: a tokio
//! runtime with only yielded tasks left polls its I/O driver with a zero
//! timeout and runs them again, so the thread checks its sockets (and
//! timers) continuously instead of sleeping. Connections report activity
//! ([`Poller::note_activity`]: an atomic add, plus a wake-up only when the
//! spinner sleeps); in window mode the spinner sleeps once the window has
//! passed without any.
//!
//! In interrupt mode the spinner sleeps too, except while a host owes a
//! queue pair data it has asked for (an R2T whose H2CData has not all
//! arrived, see [`Poller::owed`]): the data is on its way, and sleeping
//! just before it lands costs a wake-up per write. Then it spins for
//! [`OWED_WINDOW`] after the last activity, so a host that stalls mid-write
//! cannot keep a core busy. An idle server, or one serving only reads and
//! small writes, sleeps as before.
//!
//! In every mode the spinner also sleeps while a connection's output
//! waits for its socket to drain: spinning cannot speed that up, and it
//! takes the CPU from the kernel's TCP work (on loopback the receive side
//! runs in softirq context on the sending CPU). Measured on the NVMe/TCP
//! bench, 128K sequential reads at QD32: 3.5 GiB/s in interrupt mode, 1.6
//! GiB/s spinning through the waits.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How the runtime's threads wait for work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PollMode {
    /// Sleep whenever nothing is ready (the default: an idle server costs
    /// no CPU), except briefly while write data a host owes is on its way.
    #[default]
    Interrupt,
    /// Never sleep: one busy core per runtime thread, as SPDK's reactors.
    Busy,
    /// Spin for this long after the last activity, then sleep until the
    /// next.
    Window(Duration),
}

/// The longest window accepted: past a second, `busy` says it better.
pub const MAX_WINDOW: Duration = Duration::from_secs(1);

impl FromStr for PollMode {
    type Err = String;

    /// `off`, `on`, or a window such as `50us` or `2ms`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("busy poll mode {s:?}: expected off, on, or a window such as 50us or 2ms");
        match s {
            "off" => return Ok(Self::Interrupt),
            "on" => return Ok(Self::Busy),
            _ => {}
        }
        let (digits, unit) = if let Some(d) = s.strip_suffix("us") {
            (d, Duration::from_micros(1))
        } else if let Some(d) = s.strip_suffix("ms") {
            (d, Duration::from_millis(1))
        } else {
            return Err(bad());
        };
        let n: u32 = digits.parse().map_err(|_| bad())?;
        let window = unit * n;
        if window.is_zero() || window > MAX_WINDOW {
            return Err(format!(
                "busy poll window {s:?}: must be above 0 and at most 1s (`off` sleeps, `on` never does)"
            ));
        }
        Ok(Self::Window(window))
    }
}

impl fmt::Display for PollMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Interrupt => f.write_str("off"),
            Self::Busy => f.write_str("on"),
            Self::Window(w) => write!(f, "{}us", w.as_micros()),
        }
    }
}

/// Shared by the spinner and every connection; cheap to clone.
#[derive(Clone, Default)]
pub struct Poller(Arc<State>);

#[derive(Default)]
struct State {
    /// Bumped by connections on every turn of their loop.
    activity: AtomicU64,
    /// True while a spinner sleeps.
    asleep: AtomicBool,
    wake: Notify,
    /// Connection writes in progress (see [`Poller::writing`]).
    writing: AtomicUsize,
    /// Connections waiting for data their host owes (see [`Poller::owed`]).
    owed: AtomicUsize,
}

/// A connection's record of whether its host owes it data (an R2T it has
/// sent and whose H2C data has not all arrived). Clears itself on drop.
pub struct Owed<'a> {
    poller: &'a Poller,
    on: bool,
}

impl Owed<'_> {
    /// Records whether the host owes data now.
    pub fn set(&mut self, on: bool) {
        if on != self.on {
            if on {
                self.poller.0.owed.fetch_add(1, Ordering::SeqCst);
            } else {
                self.poller.0.owed.fetch_sub(1, Ordering::SeqCst);
            }
            self.on = on;
        }
    }
}

impl Drop for Owed<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// A connection write in progress; ends (and wakes a sleeping spinner)
/// when dropped.
pub struct Writing<'a>(&'a Poller);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0 .0.writing.fetch_sub(1, Ordering::SeqCst);
        self.0.note_activity();
    }
}

/// Spins between clock reads: reading the clock on every turn would cost
/// about as much as the turn itself.
const TURNS_PER_CLOCK_READ: u32 = 32;

/// In interrupt mode, how long the spinner waits for owed data to arrive
/// after the last activity before it sleeps.
const OWED_WINDOW: Duration = Duration::from_micros(50);

impl Poller {
    /// Records that a connection did something; wakes a sleeping spinner.
    pub fn note_activity(&self) {
        // SeqCst on both sides (here and where the spinner announces its
        // sleep): either the spinner sees this activity or this sees the
        // spinner asleep. On x86 the add is a locked instruction anyway.
        self.0.activity.fetch_add(1, Ordering::SeqCst);
        if self.0.asleep.load(Ordering::SeqCst) {
            self.0.asleep.store(false, Ordering::Relaxed);
            self.0.wake.notify_one();
        }
    }

    /// Marks a connection write in progress until the guard drops. A write
    /// that completes at once never lets the spinner run in between (one
    /// thread), so only writes that wait for the socket are seen.
    pub fn writing(&self) -> Writing<'_> {
        self.0.writing.fetch_add(1, Ordering::SeqCst);
        Writing(self)
    }

    /// A connection's owed-data record, off until set (see [`Owed`]).
    pub fn owed(&self) -> Owed<'_> {
        Owed {
            poller: self,
            on: false,
        }
    }

    /// True while some host owes a connection data.
    fn data_owed(&self) -> bool {
        self.0.owed.load(Ordering::SeqCst) > 0
    }

    /// Sleeps until the next activity report.
    async fn sleep(&self) {
        // Announce the sleep, then look once more: a report between the two
        // is seen here, one after them wakes us (Notify keeps a permit
        // when nobody waits yet).
        let seen = self.0.activity.load(Ordering::SeqCst);
        self.0.asleep.store(true, Ordering::SeqCst);
        if self.0.activity.load(Ordering::SeqCst) == seen {
            self.0.wake.notified().await;
        }
        self.0.asleep.store(false, Ordering::SeqCst);
    }

    /// True while some connection's write waits for its socket.
    fn write_blocked(&self) -> bool {
        self.0.writing.load(Ordering::SeqCst) > 0
    }

    /// Runs one spinner in `mode` on the current runtime thread, forever
    /// (the runtime drops it when it shuts down). Spawn one per worker
    /// thread, in every mode.
    pub async fn spin(self, mode: PollMode) {
        self.spin_owed_window(mode, OWED_WINDOW).await
    }

    /// [`Poller::spin`] with `owed_window` as interrupt mode's window.
    async fn spin_owed_window(self, mode: PollMode, owed_window: Duration) {
        let (window, only_owed) = match mode {
            PollMode::Interrupt => (owed_window, true),
            PollMode::Busy => loop {
                if self.write_blocked() {
                    self.sleep().await;
                }
                tokio::task::yield_now().await;
            },
            PollMode::Window(w) => (w, false),
        };
        let mut seen = self.0.activity.load(Ordering::Relaxed);
        let mut last = Instant::now();
        let mut turns = 0u32;
        loop {
            if self.write_blocked() || (only_owed && !self.data_owed()) {
                self.sleep().await;
                seen = self.0.activity.load(Ordering::Relaxed);
                last = Instant::now();
                continue;
            }
            tokio::task::yield_now().await;
            let now_seen = self.0.activity.load(Ordering::Relaxed);
            if now_seen != seen {
                seen = now_seen;
                turns = 0;
                last = Instant::now();
                continue;
            }
            turns += 1;
            if turns < TURNS_PER_CLOCK_READ {
                continue;
            }
            turns = 0;
            if last.elapsed() < window {
                continue;
            }
            // Announce the sleep, then look once more: activity between
            // the two is seen here, activity after them wakes us (Notify
            // keeps a permit when nobody waits yet).
            self.0.asleep.store(true, Ordering::SeqCst);
            if self.0.activity.load(Ordering::SeqCst) == seen {
                self.0.wake.notified().await;
            }
            self.0.asleep.store(false, Ordering::Relaxed);
            seen = self.0.activity.load(Ordering::Relaxed);
            last = Instant::now();
        }
    }

    /// Activity reports so far (for tests and diagnostics).
    pub fn activity(&self) -> u64 {
        self.0.activity.load(Ordering::Relaxed)
    }

    /// True while a spinner sleeps.
    pub fn asleep(&self) -> bool {
        self.0.asleep.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_back() {
        for (s, m) in [
            ("off", PollMode::Interrupt),
            ("on", PollMode::Busy),
            ("50us", PollMode::Window(Duration::from_micros(50))),
            ("2ms", PollMode::Window(Duration::from_millis(2))),
        ] {
            assert_eq!(s.parse::<PollMode>(), Ok(m));
        }
        assert_eq!(
            PollMode::Window(Duration::from_micros(50)).to_string(),
            "50us"
        );
        assert_eq!("2ms".parse::<PollMode>().unwrap().to_string(), "2000us");
        for bad in ["", "0us", "2s", "1001ms", "fast", "-5us", "5"] {
            let e = bad.parse::<PollMode>().unwrap_err();
            assert!(e.contains("busy poll"), "{bad}: {e}");
        }
    }

    /// A window-mode spinner sleeps after the window, and activity wakes it.
    #[tokio::test(flavor = "current_thread", start_paused = false)]
    async fn a_window_spinner_sleeps_when_idle_and_wakes_on_activity() {
        let p = Poller::default();
        let task = tokio::spawn(p.clone().spin(PollMode::Window(Duration::from_micros(200))));
        let until_asleep = async {
            while !p.asleep() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), until_asleep)
            .await
            .expect("the spinner sleeps once idle");
        p.note_activity();
        assert!(!p.asleep(), "activity clears the flag at once");
        // The spinner runs again, and falls asleep again after its window.
        tokio::time::timeout(Duration::from_secs(10), async {
            while !p.asleep() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the spinner sleeps again");
        task.abort();
    }

    /// A busy spinner sleeps while a write waits for its socket, and spins
    /// again once it ended.
    #[tokio::test(flavor = "current_thread")]
    async fn a_spinner_sleeps_while_a_write_waits() {
        let p = Poller::default();
        let task = tokio::spawn(p.clone().spin(PollMode::Busy));
        let w = p.writing();
        tokio::time::timeout(Duration::from_secs(10), async {
            while !p.asleep() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the spinner sleeps while the write waits");
        drop(w);
        assert!(!p.asleep(), "the write's end wakes it");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!p.asleep(), "a busy spinner stays awake without writes");
        task.abort();
    }

    /// A busy spinner never leaves the runtime idle, and other tasks still run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_busy_spinner_lets_other_tasks_and_timers_run() {
        let p = Poller::default();
        let task = tokio::spawn(p.clone().spin(PollMode::Busy));
        tokio::time::timeout(
            Duration::from_secs(10),
            tokio::time::sleep(Duration::from_millis(5)),
        )
        .await
        .expect("timers fire while the spinner spins");
        assert!(!p.asleep());
        task.abort();
    }

    /// In interrupt mode the spinner sleeps at once unless some host owes
    /// data; then it spins through its window after the last activity.
    #[tokio::test(flavor = "current_thread")]
    async fn an_interrupt_spinner_spins_only_while_data_is_owed() {
        let until_asleep = |p: Poller| async move {
            tokio::time::timeout(Duration::from_secs(10), async {
                while !p.asleep() {
                    tokio::task::yield_now().await;
                }
            })
            .await
            .is_ok()
        };
        // A window far longer than the test: while data is owed the
        // spinner must not sleep at all.
        let p = Poller::default();
        let task = tokio::spawn(
            p.clone()
                .spin_owed_window(PollMode::Interrupt, MAX_WINDOW * 60),
        );
        assert!(until_asleep(p.clone()).await, "nothing owed: it sleeps");
        let mut owed = p.owed();
        owed.set(true);
        p.note_activity();
        for _ in 0..1000 {
            tokio::task::yield_now().await;
            assert!(!p.asleep(), "data owed, inside the window: spinning");
        }
        owed.set(false);
        assert!(!p.data_owed());
        p.note_activity();
        assert!(
            until_asleep(p.clone()).await,
            "nothing owed any more: it sleeps"
        );
        task.abort();

        // With a short window it sleeps once the window has passed, though
        // data is still owed; the record clears when dropped.
        let p = Poller::default();
        let task = tokio::spawn(
            p.clone()
                .spin_owed_window(PollMode::Interrupt, Duration::from_millis(1)),
        );
        let mut owed = p.owed();
        owed.set(true);
        p.note_activity();
        assert!(until_asleep(p.clone()).await, "the window ends the spin");
        assert!(p.data_owed());
        drop(owed);
        assert!(!p.data_owed(), "the record clears on drop");
        task.abort();
    }
}
