//! `nvmf_create_transport` refuses timeouts that would overflow the
//! deadlines computed from them: before, `rackcache_h2c_data_timeout_ms =
//! u64::MAX` was accepted and the first solicited write panicked its
//! connection.

use rackcache_dataplane::app::App;
use rackcache_dataplane::rpc::server::Dispatch;
use serde_json::json;

#[tokio::test(flavor = "current_thread")]
async fn timeouts_above_an_hour_are_refused_with_a_clear_error() {
    let app = App::new();
    for key in [
        "rackcache_h2c_data_timeout_ms",
        "rackcache_write_timeout_ms",
    ] {
        for ms in [u64::MAX, 3_600_001] {
            let e = app
                .dispatch(
                    "nvmf_create_transport",
                    Some(json!({"trtype": "TCP", key: ms})),
                )
                .await
                .expect_err("an out-of-range timeout is refused");
            let msg = e.to_string();
            let what = key.trim_start_matches("rackcache_").trim_end_matches("_ms");
            assert!(
                msg.contains(what) && msg.contains("3600000 ms"),
                "{key}={ms}: {msg}"
            );
        }
    }
    // The largest allowed value is accepted.
    app.dispatch(
        "nvmf_create_transport",
        Some(json!({"trtype": "TCP", "rackcache_h2c_data_timeout_ms": 3_600_000})),
    )
    .await
    .unwrap();
}
