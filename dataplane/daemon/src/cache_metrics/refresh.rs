//! The task that copies every cached bdev's statistics into its series
//! once a [`REFRESH`] (see the parent module for why not at scrape time).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::app::App;
use crate::cached_volumes::volumes;

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
        let list = volumes(&*app.state.lock().await);
        for v in &list {
            app.cache_metrics.refresh(v).await;
        }
    }
}
