//! The TCP endpoint's token follows its file: after the operator rotates
//! it (here: the file rewritten in place, as a Secret volume's content
//! changes), the old token is refused and the new one accepted, without a
//! restart; an unusable replacement keeps the last good token.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{free_port, Daemon};
use testkit::TempDir;

const OLD: &str = "old-token-0123456789abcdef";
const NEW: &str = "new-token-0123456789abcdef";

/// The HTTP status of a `spdk_get_version` call with `token`.
fn status(port: u16, token: &str) -> u16 {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"spdk_get_version"}"#;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {answer:?}"))
}

/// Waits (the daemon looks at the file every 3 s) until `token` gets
/// `want`.
fn until(port: u16, token: &str, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(port, token) != want {
        assert!(Instant::now() < deadline, "{token}: never {want}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_rotated_token_takes_over_without_a_restart() {
    let dir = TempDir::new("token-rotation");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, OLD).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _d = Daemon::start_with(
        &dir.path().join("rpc.sock"),
        None,
        &[
            "--rpc-listen",
            &listen,
            "--rpc-token-file",
            token_file.to_str().unwrap(),
            "--rpc-insecure",
        ],
    );
    until(port, OLD, 200);
    assert_eq!(status(port, NEW), 401);
    std::fs::write(&token_file, NEW).unwrap();
    until(port, NEW, 200);
    assert_eq!(status(port, OLD), 401, "the old token is refused");
    // An unusable replacement keeps the last good token: once the daemon
    // has looked at it (its log says so; calls make it look), NEW still
    // works.
    std::fs::write(&token_file, "short").unwrap();
    let log = dir.path().join("rpc.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("token file unusable")
    {
        assert!(
            Instant::now() < deadline,
            "the daemon never read the short token"
        );
        assert_eq!(status(port, NEW), 200);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(status(port, NEW), 200);
    assert_eq!(status(port, "short"), 401);
}
