//! `GET /metrics` over HTTP/1.1 (see the `httpd` crate).

use std::sync::Arc;
use std::time::Duration;

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
    let req = match httpd::read_request(&mut stream, MAX_HEAD, 0).await {
        Ok(r) => r,
        Err(e) => {
            if let Some(status) = e.status() {
                httpd::respond(&mut stream, status, "text/plain", &[], b"bad request\n").await?;
            }
            return Ok(());
        }
    };
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/metrics") => {
            let body = registry.render();
            httpd::respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &[],
                body.as_bytes(),
            )
            .await
        }
        ("GET", _) => {
            httpd::respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                &[],
                b"only /metrics is served here\n",
            )
            .await
        }
        _ => {
            httpd::respond(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                &[("Allow", "GET")],
                b"only GET is allowed\n",
            )
            .await
        }
    }
}
