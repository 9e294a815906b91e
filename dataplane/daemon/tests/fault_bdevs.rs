//! The fault-injection bdevs through the daemon's JSON-RPC methods (called
//! in process): SPDK's parameters, claims on the base bdev, errors reaching
//! I/O, the NVMe/TCP transport's buffer and timeout parameters, and a
//! save_config that restores all of it.

use rackcache_dataplane::app::App;
use rackcache_dataplane::rpc::server::Dispatch;
use serde_json::{json, Value};

const EBUSY: i32 = -16;

async fn call(app: &App, method: &str, params: Value) -> Result<Value, i32> {
    app.dispatch(method, Some(params))
        .await
        .map_err(|e| e.code())
}

async fn ok(app: &App, method: &str, params: Value) -> Value {
    call(app, method, params)
        .await
        .unwrap_or_else(|code| panic!("{method} failed with code {code}"))
}

async fn bdev(app: &App, name: &str) -> Value {
    ok(app, "bdev_get_bdevs", json!({ "name": name })).await[0].clone()
}

#[tokio::test]
async fn delay_and_error_bdevs_claim_their_base_inject_and_are_saved() {
    let app = App::new();
    ok(
        &app,
        "bdev_malloc_create",
        json!({"name": "M0", "num_blocks": 64, "block_size": 512}),
    )
    .await;
    ok(
        &app,
        "bdev_malloc_create",
        json!({"name": "M1", "num_blocks": 64, "block_size": 512}),
    )
    .await;
    let lat = json!({
        "base_bdev_name": "M0", "name": "D0",
        "avg_read_latency": 10, "p99_read_latency": 20,
        "avg_write_latency": 30, "p99_write_latency": 40
    });
    assert_eq!(
        ok(&app, "bdev_delay_create", lat.clone()).await,
        json!("D0")
    );
    // The base is claimed: a second wrapper and deletion are refused.
    assert_eq!(bdev(&app, "M0").await["claimed"], json!(true));
    let mut again = lat.clone();
    again["name"] = json!("D1");
    assert!(call(&app, "bdev_delay_create", again).await.is_err());
    assert_eq!(
        call(&app, "bdev_malloc_delete", json!({"name": "M0"})).await,
        Err(EBUSY)
    );
    // p99 below the average is refused.
    assert!(call(
        &app,
        "bdev_delay_update_latency",
        json!({"delay_bdev_name": "D0", "latency_type": "p99_write", "latency_us": 1})
    )
    .await
    .is_err());
    ok(
        &app,
        "bdev_delay_update_latency",
        json!({"delay_bdev_name": "D0", "latency_type": "p99_write", "latency_us": 500}),
    )
    .await;
    let d = bdev(&app, "D0").await;
    assert_eq!(d["product_name"], json!("delay"));
    assert_eq!(
        d["driver_specific"]["delay"]["p99_write_latency"],
        json!(500)
    );

    assert_eq!(
        ok(&app, "bdev_error_create", json!({"base_name": "M1"})).await,
        json!("EE_M1")
    );
    ok(
        &app,
        "bdev_error_inject_error",
        json!({"name": "EE_M1", "io_type": "write", "error_type": "failure", "num": 1}),
    )
    .await;
    assert!(call(
        &app,
        "bdev_error_inject_error",
        json!({"name": "EE_M1", "io_type": "write", "error_type": "explode"})
    )
    .await
    .is_err());
    {
        let state = app.state.lock().await;
        let ee = state.bdevs["EE_M1"].1.clone();
        drop(state);
        let (buf, r) = ee.write(0, bdev::DmaBuf::new(512)).await;
        assert!(r.is_err(), "the injected failure reaches I/O");
        let (_, r) = ee.write(0, buf).await;
        assert!(r.is_ok(), "one I/O only");
    }

    ok(
        &app,
        "nvmf_create_transport",
        json!({"trtype": "TCP", "num_shared_buffers": 64, "buf_cache_size": 8,
               "io_unit_size": 8192, "rackcache_h2c_data_timeout_ms": 2500}),
    )
    .await;
    let t = &ok(&app, "nvmf_get_transports", json!({})).await[0];
    assert_eq!(
        (
            &t["num_shared_buffers"],
            &t["buf_cache_size"],
            &t["io_unit_size"]
        ),
        (&json!(64), &json!(8), &json!(8192))
    );
    assert_eq!(t["rackcache_h2c_data_timeout_ms"], json!(2500));

    // save_config, then a fresh daemon restores the same bdevs and
    // transport (the delay bdev with its updated latency).
    let saved = ok(&app, "save_config", json!({})).await;
    let dir = std::env::temp_dir().join(format!("rackcache-fault-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec(&saved).unwrap()).unwrap();
    let restored = App::new();
    let loaded = rackcache_dataplane::config::load(&path, &restored).await;
    std::fs::remove_dir_all(&dir).unwrap();
    loaded.unwrap();
    assert_eq!(
        ok(&restored, "bdev_get_bdevs", json!({})).await,
        ok(&app, "bdev_get_bdevs", json!({})).await
    );
    assert_eq!(
        ok(&restored, "nvmf_get_transports", json!({})).await,
        ok(&app, "nvmf_get_transports", json!({})).await
    );

    // Deleting the wrappers frees their bases.
    ok(&app, "bdev_delay_delete", json!({"name": "D0"})).await;
    ok(&app, "bdev_error_delete", json!({"name": "EE_M1"})).await;
    ok(&app, "bdev_malloc_delete", json!({"name": "M0"})).await;
    ok(&app, "bdev_malloc_delete", json!({"name": "M1"})).await;
}
