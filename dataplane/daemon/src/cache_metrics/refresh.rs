//! The task that copies every cached bdev's statistics into its series
//! once a [`REFRESH`] (see the parent module for why not at scrape time).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::app::App;
use crate::cached_volumes::volumes;

/// The count of start-up configuration calls that failed and are kept
/// (`rackcache_get_config_errors`).
pub const CONFIG_ERRORS: (&str, &str) = (
    "rackcache_config_errors",
    "Configuration calls that failed when the server started and are kept for a retry (rackcache_get_config_errors).",
);

/// How often the series are refreshed.
pub const REFRESH: Duration = Duration::from_secs(1);

/// Refreshes every cached bdev's series every [`REFRESH`] until `stop`.
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let (list, devices, config_errors) = {
            let state = app.state.lock().await;
            (
                volumes(&state),
                state.caches.clone(),
                state.config_errors.len(),
            )
        };
        let (name, help) = CONFIG_ERRORS;
        let g = app
            .metrics
            .gauge(name, help, &[])
            .expect("valid metric names");
        g.set(i64::try_from(config_errors).unwrap_or(i64::MAX));
        for v in &list {
            app.cache_metrics.refresh(v).await;
        }
        app.device_metrics.refresh(&app.metrics, &devices);
    }
}
