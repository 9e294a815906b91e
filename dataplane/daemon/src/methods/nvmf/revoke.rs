//! Calls that revoke access (`remove_host`, `remove_listener`,
//! `delete_subsystem`, `allow_any_host` false) persist first, then wait
//! for the queue pairs they ended.

use std::time::Duration;

use nvmf_tgt::Revocation;

use crate::app::App;

/// How long a revoking call waits for the queue pairs it ended to close:
/// SPDK's default for `nvmf_subsystem_remove_host` (CAP.TO plus 5 s).
pub(crate) const REVOKE_TIMEOUT: Duration = Duration::from_millis(15_000);

/// Persists the change that revoked access (`--config-persist`), then
/// waits for `revoked` (after the state lock is released, so other calls
/// go on meanwhile); false when some queue pair outlived `timeout`. The
/// change is on disk before the wait, so a daemon killed during the wait,
/// or a call that then reports a timeout, cannot bring the revoked access
/// back on restart. (The RPC server rewrites the file again when the call
/// succeeds: harmless.)
pub(crate) async fn persist_then_wait(
    app: &App,
    revoked: Revocation,
    timeout: Duration,
    what: &str,
) -> bool {
    if revoked.is_empty() {
        return true;
    }
    super::super::saved_config::persist(app).await;
    let n = revoked.len();
    let done = revoked.wait(timeout).await;
    if done {
        tracing::info!(controllers = n, "{what}: revoked controllers closed");
    } else {
        tracing::warn!(
            controllers = n,
            ?timeout,
            "{what}: revoked controllers still open"
        );
    }
    done
}
