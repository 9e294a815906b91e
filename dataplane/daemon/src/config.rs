//! Loading a saved configuration: the `{"subsystems": [{"subsystem",
//! "config": [{"method", "params"}]}]}` document `save_config` produces,
//! replayed call by call through the same handlers as live RPCs.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::rpc::server::Dispatch;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    subsystems: Vec<Subsystem>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Subsystem {
    subsystem: String,
    config: Option<Vec<Call>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call {
    method: String,
    params: Option<Value>,
}

/// Replays the configuration in `path`; stops at the first failing call and
/// says which one failed and why.
pub async fn load(path: &Path, dispatcher: &impl Dispatch) -> Result<usize, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let cfg: ConfigFile =
        serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))?;
    let mut applied = 0;
    for sub in cfg.subsystems {
        for (i, call) in sub.config.unwrap_or_default().into_iter().enumerate() {
            dispatcher
                .dispatch(&call.method, call.params)
                .await
                .map_err(|e| {
                    format!(
                        "{}: subsystem {} entry {i} ({}): {e}",
                        path.display(),
                        sub.subsystem,
                        call.method
                    )
                })?;
            applied += 1;
        }
    }
    Ok(applied)
}
