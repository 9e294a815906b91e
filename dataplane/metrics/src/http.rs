//! `GET /metrics` over HTTP/1.1: just enough HTTP for Prometheus scrapers
//! and curl (one request per connection, `Connection: close`), so the
//! dataplane carries no web framework.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::Registry;

/// Largest request head accepted; scrapers send a few hundred bytes.
const MAX_HEAD: usize = 16 << 10;

/// Serves `registry` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    let r = Arc::clone(&registry);
                    tokio::spawn(async move {
                        // A slow or silent client gets 10 s, then is dropped.
                        let _ = tokio::time::timeout(Duration::from_secs(10), handle(stream, &r)).await;
                    });
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

async fn handle(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
        if head.len() > MAX_HEAD {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request head too large\n",
            )
            .await;
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = registry.render();
            respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
            .await
        }
        ("GET", _) => {
            respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                "only /metrics is served here\n",
            )
            .await
        }
        _ => {
            respond(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                "only GET is allowed\n",
            )
            .await
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
