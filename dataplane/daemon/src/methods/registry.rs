//! What every bdev-creating method shares: names (SPDK's rules and
//! defaults), registration in the daemon's state with counters, and the
//! UUID text form.

use std::sync::Arc;

use bdev::Bdev;
use serde_json::Value;

use crate::app::{App, IoStats, RegisteredBdev, State};
use crate::rpc::error::{libc_errno, RpcError};

/// A bdev name: 1-255 printable ASCII characters (letters, digits,
/// punctuation and space), no '/'. No control characters, and nothing
/// outside ASCII: a name is shown in logs, metrics labels and `kubectl`
/// output, where Unicode direction overrides or look-alike letters could
/// make one bdev pass for another.
pub(crate) fn check_name(name: &str) -> Result<(), RpcError> {
    let printable = |b: u8| b == b' ' || b.is_ascii_graphic();
    if name.is_empty() || name.len() > 255 || !name.bytes().all(|b| printable(b) && b != b'/') {
        return Err(RpcError::invalid_params(format!(
            "bdev name {name:?} must be 1-255 printable ASCII characters (letters, digits, punctuation, space) without '/'"
        )));
    }
    Ok(())
}

pub(crate) fn exists(state: &State, name: &str) -> Result<(), RpcError> {
    if state.bdevs.contains_key(name) {
        return Err(RpcError::errno(
            libc_errno::EEXIST,
            format!("bdev {name} already exists"),
        ));
    }
    Ok(())
}

pub(crate) fn register(
    app: &App,
    state: &mut State,
    name: String,
    bdev: Bdev,
    method: &'static str,
    params: Value,
    cluster: Option<String>,
) {
    let seq = state.seq();
    let reg = RegisteredBdev {
        bdev: Arc::new(bdev),
        stats: IoStats::register(&app.metrics, &name),
        created_by: (method, params),
        cluster,
    };
    state.bdevs.insert(name, (seq, Arc::new(reg)));
}

pub(crate) fn uuid_string(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn bdev_names_are_printable_ascii_without_a_slash() {
        for ok in [
            "Malloc0",
            "rbd-pool/img".replace('/', "_").as_str(),
            "a b",
            "x.y:z@1",
        ] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        let long = "n".repeat(256);
        for bad in [
            "",
            "a/b",
            "tab\there",
            "evil\u{202e}gpj.exe",
            "\u{430}dmin",
            long.as_str(),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
