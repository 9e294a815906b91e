//! The Kubernetes probes on the metrics port, over real HTTP: /healthz
//! answers whenever the server runs, /readyz only once the process said it
//! is ready (503 with the reason before, and again when it stops being).

use std::sync::Arc;

use metrics::{http, Registry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// `GET path`; returns (status code, body).
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    let code = resp.split(' ').nth(1).unwrap().parse().unwrap();
    let body = resp.split_once("\r\n\r\n").unwrap().1.to_owned();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_readiness_and_healthz_always_answers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let readiness = http::Readiness::new("applying the start-up configuration");
    let (stop, stopped) = watch::channel(false);
    let server = tokio::spawn(http::serve(
        listener,
        Registry::new(),
        Arc::clone(&readiness),
        None,
        stopped,
    ));

    assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_owned()));
    assert_eq!(
        get(addr, "/readyz").await,
        (
            503,
            "not ready: applying the start-up configuration\n".to_owned()
        )
    );
    readiness.not_ready("opening the RPC listeners");
    assert_eq!(
        get(addr, "/readyz").await,
        (503, "not ready: opening the RPC listeners\n".to_owned())
    );
    readiness.ready();
    assert_eq!(get(addr, "/readyz").await, (200, "ok\n".to_owned()));
    assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_owned()));
    readiness.not_ready("shutting down");
    assert_eq!(get(addr, "/readyz").await.0, 503);
    // The metrics are still where they were; other paths are not found.
    assert_eq!(get(addr, "/metrics").await.0, 200);
    assert_eq!(get(addr, "/livez").await.0, 404);

    stop.send(true).unwrap();
    server.await.unwrap();
}
