//! JSON-RPC over HTTP on TCP (bearer token required) and the Prometheus
//! endpoint of a running daemon.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Daemon;
use testkit::TempDir;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP request; returns (status code, body).
fn http(port: u16, request: &str) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("connect to 127.0.0.1:{port}: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let code = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

fn rpc(port: u16, token: Option<&str>, body: &str) -> (u16, String) {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    http(
        port,
        &format!("POST / HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()),
    )
}

#[test]
fn tcp_rpc_needs_the_token_and_metrics_are_served() {
    let work = TempDir::new("rackcache-tcp-rpc");
    let token = "0123456789abcdef-test-token";
    let token_file = work.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let (rpc_port, metrics_port) = (free_port(), free_port());
    let socket = work.path().join("spdk.sock");
    let rpc_addr = format!("127.0.0.1:{rpc_port}");
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let d = Daemon::start_with(
        &socket,
        None,
        &[
            "--rpc-listen",
            &rpc_addr,
            "--rpc-token-file",
            token_file.to_str().unwrap(),
            "--metrics-listen",
            &metrics_addr,
        ],
    );

    let create = r#"{"jsonrpc":"2.0","id":1,"method":"bdev_malloc_create","params":{"num_blocks":64,"block_size":512}}"#;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"bdev_get_bdevs"}"#;

    // Refused without a token, with a wrong one, and with a prefix of it;
    // nothing was created.
    for t in [None, Some("wrong-token-wrong-token"), Some(&token[..8])] {
        let (code, _) = rpc(rpc_port, t, create);
        assert_eq!(code, 401, "token {t:?}");
    }
    let (code, body) = rpc(rpc_port, Some(token), list);
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"], serde_json::json!([]), "{body}");

    let (code, body) = rpc(rpc_port, Some(token), create);
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"], "Malloc0", "{body}");
    let (code, body) = rpc(rpc_port, Some(token), "{not json");
    assert_eq!(code, 200);
    assert!(body.contains("-32700"), "{body}");
    let (code, _) = http(
        rpc_port,
        &format!("GET / HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\r\n"),
    );
    assert_eq!(code, 405);

    // The new bdev's series are on /metrics.
    let (code, body) = http(metrics_port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(code, 200);
    assert!(
        body.contains("rackcache_bdev_read_bytes_total{bdev=\"Malloc0\"} 0\n"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE rackcache_bdev_read_latency_seconds histogram\n"),
        "{body}"
    );
    assert!(!body.contains(token), "the token leaked into metrics");
    let log = std::fs::read_to_string(socket.with_extension("log")).unwrap();
    assert!(!log.contains(token), "the token leaked into the log");
    drop(d);
}

#[test]
fn a_short_token_is_refused_at_start() {
    let work = TempDir::new("rackcache-short-token");
    let token_file = work.path().join("token");
    std::fs::write(&token_file, "short").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rackcache-dataplane"))
        .arg("--rpc-socket")
        .arg(work.path().join("s.sock"))
        .args(["--rpc-listen", "127.0.0.1:0", "--rpc-token-file"])
        .arg(&token_file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("shorter than 16 characters"));
}
