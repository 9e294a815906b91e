//! The control plane's lease on this server's ANA paths
//! (docs/dataplane.md, "Lease and ANA fence"). A server whose pool runs
//! mirrors is renewed a lease by the operator (`rackcache_lease_renew`).
//! Should the renewals stop (the server cut off from the control plane,
//! which may then promote a mirror), the lease runs out and the target's
//! ANA fence goes up ([`nvmf_tgt::ana_fence`]): every ANA path reports
//! inaccessible, so hosts stop sending this server writes it may no longer
//! own. The next renewal lifts it. Before the first grant nothing is
//! fenced: servers of pools without mirrors are never renewed anything.
//!
//! Time is tokio's monotonic clock, so a wall clock step never ends a
//! lease early or late, and tests pause it. The lease is not saved: a
//! restarted server's ANA listeners come back inaccessible anyway
//! (`save_config`), and its lease comes back with the first renewal.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use nvmf_tgt::Target;
use tokio::sync::watch;
use tokio::time::Instant;

/// The lease (one per daemon).
pub struct Lease {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// When the current grant runs out (the watchdog sleeps until then).
    deadline: watch::Sender<Option<Instant>>,
}

#[derive(Default)]
struct State {
    /// The last grant; None before the first.
    grant: Option<Grant>,
    /// The grant ran out without a renewal: the target's ANA fence is up.
    fenced: bool,
    /// The target the fence applies to (once `nvmf_create_transport` made
    /// it).
    target: Option<Target>,
    watchdog_running: bool,
}

struct Grant {
    holder: String,
    expires: Instant,
}

/// What `rackcache_lease_get` reports.
#[derive(Debug, PartialEq, Eq)]
pub struct LeaseStatus {
    /// A lease was granted at least once.
    pub granted: bool,
    /// It ran out: the ANA fence is up.
    pub fenced: bool,
    /// Time left (zero when not granted or run out).
    pub expires_in: Duration,
    /// Who renewed it last.
    pub holder: Option<String>,
}

impl Default for Lease {
    fn default() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                deadline: watch::channel(None).0,
            }),
        }
    }
}

impl Lease {
    /// Grants or renews the lease for `duration` from now on behalf of
    /// `holder`, lifting the ANA fence if it was up. Returns the time
    /// left. Runs on the runtime (it starts the watchdog at the first
    /// grant).
    pub fn renew(&self, holder: &str, duration: Duration) -> Duration {
        let expires = Instant::now() + duration;
        let mut s = self.shared.lock();
        let previous = s.grant.replace(Grant {
            holder: holder.to_owned(),
            expires,
        });
        let ms = duration.as_millis() as u64;
        match previous {
            None => tracing::info!(holder, duration_ms = ms, "lease granted"),
            Some(p) if p.holder != holder => {
                tracing::info!(holder, previous = %p.holder, duration_ms = ms, "lease renewed by another holder")
            }
            Some(_) => tracing::debug!(holder, duration_ms = ms, "lease renewed"),
        }
        if s.fenced {
            s.fenced = false;
            if let Some(t) = &s.target {
                t.set_ana_fenced(false);
            }
            tracing::info!(
                holder,
                duration_ms = ms,
                "lease renewed after it ran out: ANA fence lifted"
            );
        }
        if !s.watchdog_running {
            s.watchdog_running = true;
            tokio::spawn(watchdog(
                Arc::downgrade(&self.shared),
                self.shared.deadline.subscribe(),
            ));
        }
        self.shared.deadline.send_replace(Some(expires));
        duration
    }

    /// The lease as `rackcache_lease_get` reports it.
    pub fn status(&self) -> LeaseStatus {
        let s = self.shared.lock();
        LeaseStatus {
            granted: s.grant.is_some(),
            fenced: s.fenced,
            expires_in: s.grant.as_ref().map_or(Duration::ZERO, |g| {
                g.expires.saturating_duration_since(Instant::now())
            }),
            holder: s.grant.as_ref().map(|g| g.holder.clone()),
        }
    }

    /// Makes `target` the one the fence applies to (fenced at once when
    /// the lease has run out already).
    pub fn attach(&self, target: &Target) {
        let mut s = self.shared.lock();
        target.set_ana_fenced(s.fenced);
        s.target = Some(target.clone());
    }

    /// Lets go of the target (at shutdown): the lease's reference would
    /// keep its subsystems, their namespaces' bdevs and so the RBD images
    /// open, and the process would wait for their close forever.
    pub fn detach(&self) {
        self.shared.lock().target = None;
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Raises the fence if the grant ran out by `now` (a renewal that came
    /// first moved it on).
    fn expire_if_due(&self, now: Instant) {
        let mut s = self.lock();
        let Some(g) = &s.grant else { return };
        if s.fenced || now < g.expires {
            return;
        }
        let (holder, late) = (g.holder.clone(), now - g.expires);
        s.fenced = true;
        if let Some(t) = &s.target {
            t.set_ana_fenced(true);
        }
        tracing::warn!(holder = %holder, late_ms = late.as_millis() as u64,
            "lease ran out without a renewal: ANA fence raised, every ANA path reports inaccessible");
    }
}

/// Sleeps until the grant's deadline, raises the fence if nothing renewed
/// it by then, and waits for the next grant; ends with the daemon.
async fn watchdog(shared: Weak<Shared>, mut deadline: watch::Receiver<Option<Instant>>) {
    loop {
        let due = *deadline.borrow_and_update();
        if let Some(due) = due {
            tokio::select! {
                _ = tokio::time::sleep_until(due) => {
                    let Some(s) = shared.upgrade() else { return };
                    s.expire_if_due(Instant::now());
                }
                changed = deadline.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        if deadline.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use nvmf_tgt::ana::AnaState;
    use nvmf_tgt::{SubsystemConfig, TransportOptions};

    use super::*;

    const NQN: &str = "nqn.2016-06.io.rackcache:lease";

    /// A target with one subsystem reporting ANA states on a listener of
    /// its own, with group 1 set non-optimized there.
    async fn ana_target() -> (Target, Arc<nvmf_tgt::Subsystem>, SocketAddr) {
        let t = Target::new(TransportOptions::default(), metrics::Registry::new()).unwrap();
        let mut cfg = SubsystemConfig::new(NQN);
        cfg.ana_reporting = true;
        let sub = t.add_subsystem(cfg).unwrap();
        let listen = t
            .add_listener(NQN, "127.0.0.1:0".parse().unwrap(), None, None)
            .await
            .unwrap();
        sub.set_ana_state(listen, Some(1), AnaState::NonOptimized)
            .unwrap();
        (t, sub, listen)
    }

    /// Lets the watchdog run after the paused clock moved.
    async fn advance(d: Duration) {
        tokio::time::advance(d).await;
        tokio::task::yield_now().await;
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_fenced_before_the_first_grant() {
        let (t, _, _) = ana_target().await;
        let lease = Lease::default();
        lease.attach(&t);
        advance(Duration::from_secs(3600)).await;
        assert!(!t.ana_fenced());
        let st = lease.status();
        assert_eq!((st.granted, st.fenced, st.holder), (false, false, None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_that_runs_out_fences_and_a_renewal_lifts_the_fence() {
        let (t, sub, listen) = ana_target().await;
        let lease = Lease::default();
        lease.attach(&t);
        lease.renew("operator-a", Duration::from_millis(1000));
        advance(Duration::from_millis(999)).await;
        assert!(!t.ana_fenced(), "1 ms left");
        // A renewal moves the deadline on.
        lease.renew("operator-a", Duration::from_millis(1000));
        advance(Duration::from_millis(999)).await;
        assert!(!t.ana_fenced(), "renewed");
        assert_eq!(lease.status().expires_in, Duration::from_millis(1));
        advance(Duration::from_millis(2)).await;
        assert!(t.ana_fenced(), "ran out");
        let st = lease.status();
        assert_eq!((st.granted, st.fenced), (true, true));
        assert_eq!(st.expires_in, Duration::ZERO);
        assert_eq!(sub.ana_states(listen).state(1), AnaState::Inaccessible);

        lease.renew("operator-b", Duration::from_millis(5000));
        assert!(!t.ana_fenced(), "lifted at the renewal");
        assert_eq!(sub.ana_states(listen).state(1), AnaState::NonOptimized);
        assert_eq!(lease.status().holder.as_deref(), Some("operator-b"));
        advance(Duration::from_millis(5001)).await;
        assert!(t.ana_fenced(), "and raised again when that one ran out");
    }

    #[tokio::test(start_paused = true)]
    async fn a_target_made_after_the_lease_ran_out_is_fenced() {
        let lease = Lease::default();
        lease.renew("operator", Duration::from_millis(1000));
        advance(Duration::from_millis(1001)).await;
        assert!(lease.status().fenced);
        let (t, sub, listen) = ana_target().await;
        lease.attach(&t);
        assert!(t.ana_fenced());
        assert_eq!(sub.ana_states(listen).state(1), AnaState::Inaccessible);
        lease.renew("operator", Duration::from_millis(1000));
        assert!(!t.ana_fenced());
    }
}
