//! What bounds a TCP JSON-RPC caller, in process: the time to send a
//! request head (tokio's paused clock, so no wall-clock waits), the caps
//! on connections that have not authenticated (per peer address: each
//! test peer is another 127.0.0.x), and the authenticated slots.

use std::sync::Arc;
use std::time::Duration;

use rackcache_dataplane::app::App;
use rackcache_dataplane::rpc::http::{serve_tcp, TcpOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

const TOKEN: &str = "0123456789abcdef-test-token";

async fn start(max_connections: usize, header_timeout: Duration) -> (u16, watch::Sender<bool>) {
    start_with(|o| {
        o.max_connections = max_connections;
        o.header_timeout = header_timeout;
    })
    .await
}

async fn start_with(set: impl FnOnce(&mut TcpOptions)) -> (u16, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut o = TcpOptions::new(TOKEN.to_owned(), None);
    set(&mut o);
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(serve_tcp(listener, o, Arc::new(App::new()), stopped));
    (port, stop)
}

async fn read_to_end(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    // A reset counts as the end too: the server closed.
    let _ = s.read_to_end(&mut out).await;
    out
}

/// A request with no token: answered 401 when the connection is served.
const PROBE: &[u8] = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";

#[tokio::test(start_paused = true)]
async fn a_request_head_that_never_completes_is_dropped_after_the_timeout() {
    let timeout = Duration::from_secs(10);
    let (port, _stop) = start(4, timeout).await;
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    // The paused clock jumps to the next timer whenever every task waits:
    // without a head timeout this read would wait for an hour of it.
    let answer = tokio::time::timeout(Duration::from_secs(3600), read_to_end(&mut s))
        .await
        .expect("the server closed the connection");
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // On the paused clock these bounds are exact, not wall-clock guesses:
    // closed by the head timeout, not by some later overall limit.
    let waited = started.elapsed();
    assert!(
        waited >= timeout && waited < 2 * timeout,
        "closed after {waited:?}"
    );

    // A client that sends nothing at all is dropped the same way.
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let started = tokio::time::Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(3600), read_to_end(&mut s))
        .await
        .expect("the server closed the silent connection");
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"));
    let waited = started.elapsed();
    assert!(
        waited >= timeout && waited < 2 * timeout,
        "closed after {waited:?}"
    );

    // A complete head is answered.
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(PROBE).await.unwrap();
    assert!(read_to_end(&mut s).await.starts_with(b"HTTP/1.1 401 "));
}

/// A connection from `source` (a loopback address: each is another peer).
async fn connect_from(source: &str, port: u16) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{source}:0").parse().unwrap()).unwrap();
    s.connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap()
}

/// An authenticated call's whole answer.
async fn call(port: u16, body: &str) -> Vec<u8> {
    let mut s = connect_from("127.0.0.1", port).await;
    let req = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), read_to_end(&mut s))
        .await
        .expect("answered")
}

const GET_VERSION: &str = r#"{"jsonrpc":"2.0","id":1,"method":"spdk_get_version"}"#;

#[tokio::test]
async fn unauthenticated_connections_cannot_keep_the_operator_out() {
    // A head timeout far beyond the test: only the caps are at work here.
    let (port, _stop) = start_with(|o| {
        o.max_connections = 2;
        o.max_unauthenticated = 16;
        o.max_unauthenticated_per_peer = 4;
        o.header_timeout = Duration::from_secs(3600);
    })
    .await;
    // 64 connections from 16 addresses, each with half a request head.
    let mut idle = Vec::new();
    for a in 2..18 {
        for _ in 0..4 {
            let mut s = connect_from(&format!("127.0.0.{a}"), port).await;
            s.write_all(b"POST / HTTP/1.1\r\n").await.unwrap();
            idle.push(s);
        }
    }
    // Only the newest 16 still wait (the older ones made room). A fifth
    // from the newest address is closed at once, without an answer.
    let mut fifth = connect_from("127.0.0.17", port).await;
    let _ = fifth.write_all(PROBE).await;
    let answer = tokio::time::timeout(Duration::from_secs(60), read_to_end(&mut fifth))
        .await
        .expect("closed");
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    // Twelve authenticated calls in a row are all served: each one's
    // connection made the oldest waiting one give way, and none of the
    // waiting ones ever held an authenticated slot.
    for i in 0..12 {
        let answer = call(port, GET_VERSION).await;
        assert!(
            answer.starts_with(b"HTTP/1.1 200 ") && answer.ends_with(b"}"),
            "call {i}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
}

#[tokio::test]
async fn only_an_authenticated_request_takes_a_slot_and_past_them_is_answered_503() {
    let (port, _stop) = start_with(|o| {
        o.max_connections = 1;
        o.header_timeout = Duration::from_secs(3600);
    })
    .await;
    // Unauthenticated callers take no slot: each is answered 401.
    for _ in 0..3 {
        let mut s = connect_from("127.0.0.1", port).await;
        s.write_all(PROBE).await.unwrap();
        assert!(read_to_end(&mut s).await.starts_with(b"HTTP/1.1 401 "));
    }
    // An authenticated request whose body never comes holds the one slot.
    let mut holder = connect_from("127.0.0.1", port).await;
    let head = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n"
    );
    holder.write_all(head.as_bytes()).await.unwrap();
    let mut busy = None;
    for _ in 0..100 {
        let answer = call(port, GET_VERSION).await;
        if answer.starts_with(b"HTTP/1.1 503 ") {
            busy = Some(answer);
            break;
        }
        // The holder's head may not have been read yet.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        busy.is_some(),
        "a second authenticated request while the slot is held: 503"
    );
    // Its slot comes back when it goes.
    drop(holder);
    let mut served = false;
    for _ in 0..100 {
        if call(port, GET_VERSION).await.starts_with(b"HTTP/1.1 200 ") {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "the slot of a closed connection was not reused");
}
