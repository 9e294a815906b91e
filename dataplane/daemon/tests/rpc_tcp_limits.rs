//! What bounds a TCP JSON-RPC caller, in process: the time to send a
//! request head (tokio's paused clock, so no wall-clock waits) and the
//! number of connections served at once.

use std::sync::Arc;
use std::time::Duration;

use rackcache_dataplane::app::App;
use rackcache_dataplane::rpc::http::{serve_tcp, TcpOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const TOKEN: &str = "0123456789abcdef-test-token";

async fn start(max_connections: usize, header_timeout: Duration) -> (u16, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut o = TcpOptions::new(TOKEN.to_owned(), None);
    o.max_connections = max_connections;
    o.header_timeout = header_timeout;
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

#[tokio::test]
async fn connections_over_the_cap_are_closed_and_slots_come_back() {
    // A head timeout far beyond the test: only the cap is at work here.
    let (port, _stop) = start(2, Duration::from_secs(3600)).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        // Half a head: the server holds the slot waiting for the rest.
        s.write_all(b"POST / HTTP/1.1\r\n").await.unwrap();
        idle.push(s);
    }
    // Accepted in order, so the third is over the cap: closed, no answer.
    let mut third = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _ = third.write_all(PROBE).await;
    let answer = tokio::time::timeout(Duration::from_secs(60), read_to_end(&mut third))
        .await
        .expect("the connection over the cap was closed");
    assert!(
        answer.is_empty(),
        "served over the cap: {}",
        String::from_utf8_lossy(&answer)
    );

    // Closing an idle connection frees its slot (the server sees EOF).
    drop(idle.pop());
    let mut served = false;
    for _ in 0..600 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let _ = s.write_all(PROBE).await;
        if read_to_end(&mut s).await.starts_with(b"HTTP/1.1 401 ") {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "a slot freed by a closed connection was not reused");
}
