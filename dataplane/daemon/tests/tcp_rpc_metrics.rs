//! JSON-RPC over TCP (TLS, bearer token checked before the body is read)
//! and the Prometheus endpoint and probes of a running daemon; the flag
//! combinations that must refuse to start.

mod common;

use std::io::{Read, Write};

use common::tls::{
    connect, https, make_pki, parse_response, read_all, rpc_request, tls_connect, Pki,
};
use common::{free_port, start_fails, Daemon};
use testkit::TempDir;

const TOKEN: &str = "0123456789abcdef-test-token";
const CREATE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"bdev_malloc_create","params":{"num_blocks":64,"block_size":512}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"bdev_get_bdevs"}"#;

/// One plain HTTP request; returns (status code, body).
fn http(port: u16, request: &[u8]) -> (u16, String) {
    let mut s = connect(port);
    s.write_all(request).unwrap();
    parse_response(&read_all(&mut s))
}

fn token_file(work: &TempDir) -> String {
    let f = work.path().join("token");
    std::fs::write(&f, format!("{TOKEN}\n")).unwrap();
    f.to_str().unwrap().to_owned()
}

/// The daemon (Unix socket `spdk.sock` in `work`) serving JSON-RPC on
/// 127.0.0.1:`port` with the test token: over TLS with `pki`'s server
/// certificate, or without one over plain HTTP (`--rpc-insecure`); `extra`
/// are further flags.
fn start_rpc(work: &TempDir, port: u16, pki: Option<&Pki>, extra: &[&str]) -> Daemon {
    let addr = format!("127.0.0.1:{port}");
    let tf = token_file(work);
    let mut args = vec!["--rpc-listen", &addr, "--rpc-token-file", &tf];
    match pki {
        Some(pki) => args.extend([
            "--rpc-tls-cert",
            pki.cert.to_str().unwrap(),
            "--rpc-tls-key",
            pki.key.to_str().unwrap(),
        ]),
        None => args.push("--rpc-insecure"),
    }
    args.extend_from_slice(extra);
    Daemon::start_with(&work.path().join("spdk.sock"), None, &args)
}

#[test]
fn tls_rpc_needs_the_token_and_metrics_are_served() {
    let work = TempDir::new("rackcache-tcp-rpc");
    let pki = make_pki(work.path(), "server");
    let (rpc_port, metrics_port) = (free_port(), free_port());
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let d = start_rpc(
        &work,
        rpc_port,
        Some(&pki),
        &["--metrics-listen", &metrics_addr],
    );
    let call = |t: Option<&[u8]>, body: &str| https(rpc_port, &pki.ca, &rpc_request(t, body));

    // Refused without a token, with a wrong one, with a prefix of it, and
    // with the token followed by 256 more bytes (accepted before: the
    // length difference was truncated to 8 bits); nothing was created.
    let long = [TOKEN.as_bytes(), &[b'x'; 256]].concat();
    for t in [
        None,
        Some(b"wrong-token-wrong-token".as_slice()),
        Some(&TOKEN.as_bytes()[..8]),
        Some(long.as_slice()),
    ] {
        let (code, _) = call(t, CREATE);
        assert_eq!(code, 401, "token {:?}", t.map(String::from_utf8_lossy));
    }
    let (code, body) = call(Some(TOKEN.as_bytes()), LIST);
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"], serde_json::json!([]), "{body}");

    let (code, body) = call(Some(TOKEN.as_bytes()), CREATE);
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"], "Malloc0", "{body}");
    let (code, body) = call(Some(TOKEN.as_bytes()), "{not json");
    assert_eq!(code, 200);
    assert!(body.contains("-32700"), "{body}");
    let get = format!("GET / HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n");
    assert_eq!(https(rpc_port, &pki.ca, get.as_bytes()).0, 405);

    // Plain HTTP to the TLS endpoint gets no HTTP answer at all.
    let mut s = connect(rpc_port);
    s.write_all(&rpc_request(Some(TOKEN.as_bytes()), LIST))
        .unwrap();
    let answer = read_all(&mut s);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP was answered: {}",
        String::from_utf8_lossy(&answer)
    );

    // A client trusting another CA refuses the server.
    let other = make_pki(work.path(), "other");
    assert!(tls_connect(rpc_port, &other.ca).is_err());

    // The new bdev's series are on /metrics.
    let (code, body) = http(metrics_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(code, 200);
    assert!(
        body.contains("rackcache_bdev_read_bytes_total{bdev=\"Malloc0\"} 0\n"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE rackcache_bdev_read_latency_seconds histogram\n"),
        "{body}"
    );
    assert!(!body.contains(TOKEN), "the token leaked into metrics");
    // The probes the DaemonSet uses, on the metrics port: alive, and ready
    // once the RPC servers listen (they have answered above; the flag is
    // set a moment after the listeners are opened, hence the bounded wait).
    let (code, body) = http(metrics_port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, body) = http(metrics_port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
        if code == 200 {
            assert_eq!(body, "ok\n");
            break;
        }
        assert_eq!(code, 503, "{body}");
        assert!(std::time::Instant::now() < deadline, "never ready: {body}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(work.path().join("spdk.log")).unwrap();
    assert!(!log.contains(TOKEN), "the token leaked into the log");
    drop(d);
}

/// The token is checked from the head: a wrong token announcing a 16 MiB
/// body (under the 32 MiB limit) gets 401 at once, without any body sent
/// (before, the daemon waited for the whole body first).
#[test]
fn a_wrong_token_is_refused_before_the_body_is_read() {
    let work = TempDir::new("rackcache-tcp-401");
    let pki = make_pki(work.path(), "server");
    let port = free_port();
    let _d = start_rpc(&work, port, Some(&pki), &[]);
    let mut s = tls_connect(port, &pki.ca).unwrap();
    s.write_all(
        b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-token-wrong-token\r\n\
          Content-Type: application/json\r\nContent-Length: 16777216\r\n\r\n",
    )
    .unwrap();
    s.flush().unwrap();
    // The read timeout (30 s, set by connect) turns a daemon waiting for
    // the body into a failure instead of a hang.
    let mut head = [0u8; 64];
    let n = s
        .read(&mut head)
        .expect("an answer before any body was sent");
    assert!(
        head[..n].starts_with(b"HTTP/1.1 401 "),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );
    // The right token with a body over the limit: 413, body unread.
    let mut s = tls_connect(port, &pki.ca).unwrap();
    s.write_all(
        format!("POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 1073741824\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    s.flush().unwrap();
    let n = s.read(&mut head).unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 413 "));
}

/// `--rpc-insecure` serves plain HTTP (test set-ups), still with the token.
#[test]
fn insecure_mode_serves_plain_http_with_the_token() {
    let work = TempDir::new("rackcache-tcp-insecure");
    let port = free_port();
    let _d = start_rpc(&work, port, None, &[]);
    assert_eq!(http(port, &rpc_request(None, LIST)).0, 401);
    let (code, body) = http(port, &rpc_request(Some(TOKEN.as_bytes()), LIST));
    assert_eq!(
        (code, body.contains("\"result\":[]")),
        (200, true),
        "{body}"
    );
}

#[test]
fn unsafe_or_incomplete_flags_are_refused_at_start() {
    let work = TempDir::new("rackcache-tcp-flags");
    let pki = make_pki(work.path(), "server");
    let tf = token_file(&work);
    let (cert, key) = (pki.cert.to_str().unwrap(), pki.key.to_str().unwrap());
    let listen = ["--rpc-listen", "127.0.0.1:0", "--rpc-token-file", &tf];

    // Plain HTTP needs saying so.
    let err = start_fails(work.path(), &listen);
    assert!(err.contains("--rpc-insecure"), "{err}");
    // TLS needs both files, and excludes --rpc-insecure.
    let err = start_fails(
        work.path(),
        &[&listen[..], &["--rpc-tls-cert", cert]].concat(),
    );
    assert!(err.contains("--rpc-tls-key"), "{err}");
    let err = start_fails(
        work.path(),
        &[
            &listen[..],
            &[
                "--rpc-tls-cert",
                cert,
                "--rpc-tls-key",
                key,
                "--rpc-insecure",
            ],
        ]
        .concat(),
    );
    assert!(err.contains("cannot be used with"), "{err}");
    // A key that is not a key.
    let err = start_fails(
        work.path(),
        &[
            &listen[..],
            &["--rpc-tls-cert", cert, "--rpc-tls-key", cert],
        ]
        .concat(),
    );
    assert!(err.contains("private key"), "{err}");

    std::fs::write(work.path().join("short"), "short").unwrap();
    let short = work.path().join("short");
    let err = start_fails(
        work.path(),
        &[
            "--rpc-listen",
            "127.0.0.1:0",
            "--rpc-insecure",
            "--rpc-token-file",
            short.to_str().unwrap(),
        ],
    );
    assert!(err.contains("shorter than 16 characters"), "{err}");
}
