//! `save_config` sees the state once: a bdev created and exported while it
//! runs is either in both sections or in neither. Before, the bdev section
//! and the nvmf section were read under two separate lock acquisitions, and
//! a change in between produced a configuration whose namespace named a
//! bdev the configuration did not create.
//!
//! Deterministic on tokio's fair (FIFO) mutex: the test holds the state
//! lock while `save_config`, then a bdev creation, then a namespace
//! addition queue up behind it, in that order.

use std::sync::Arc;

use rackcache_dataplane::app::App;
use rackcache_dataplane::rpc::server::Dispatch;
use serde_json::{json, Value};

const NQN: &str = "nqn.2016-06.io.rackcache:snap";

async fn call(app: &App, method: &str, params: Value) -> Value {
    app.dispatch(method, Some(params))
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

/// Lets every spawned task run until it waits (here: on the state lock).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn save_config_is_one_consistent_snapshot() {
    let app = Arc::new(App::new());
    call(&app, "nvmf_create_transport", json!({"trtype": "TCP"})).await;
    call(&app, "nvmf_create_subsystem", json!({"nqn": NQN})).await;

    let held = app.state.lock().await;
    let a = Arc::clone(&app);
    let save = tokio::spawn(async move { a.dispatch("save_config", None).await.unwrap() });
    settle().await;
    let a = Arc::clone(&app);
    let create = tokio::spawn(async move {
        call(
            &a,
            "bdev_malloc_create",
            json!({"name": "M1", "num_blocks": 64, "block_size": 512}),
        )
        .await
    });
    settle().await;
    let a = Arc::clone(&app);
    let export = tokio::spawn(async move {
        call(
            &a,
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "M1"}}),
        )
        .await
    });
    settle().await;
    drop(held);
    let saved = save.await.unwrap();
    create.await.unwrap();
    export.await.unwrap();

    // Every namespace's bdev is created by the same configuration.
    let section = |name: &str| -> Vec<Value> {
        saved["subsystems"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subsystem"] == name)
            .and_then(|s| s["config"].as_array().cloned())
            .unwrap_or_default()
    };
    let created: Vec<String> = section("bdev")
        .iter()
        .filter_map(|c| c["params"]["name"].as_str().map(str::to_owned))
        .collect();
    for c in section("nvmf") {
        if c["method"] == "nvmf_subsystem_add_ns" {
            let b = c["params"]["namespace"]["bdev_name"].as_str().unwrap();
            assert!(
                created.iter().any(|n| n == b),
                "the namespace names bdev {b}, which the configuration does not create:\n{saved:#}"
            );
        }
    }

    // And the saved configuration replays into a fresh daemon.
    let fresh = App::new();
    for s in ["bdev", "nvmf"] {
        for c in section(s) {
            let m = c["method"].as_str().unwrap();
            fresh
                .dispatch(m, c.get("params").cloned())
                .await
                .unwrap_or_else(|e| panic!("replay {m}: {e}"));
        }
    }
}
