//! `GET /metrics` over HTTP/1.1, served by hyper.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::Registry;

/// The exposition format [`Registry::render`] produces.
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Scrapers open one connection at a time; a few more cover retries, and
/// the cap keeps a flood of idle connections from exhausting descriptors.
const MAX_CONNECTIONS: usize = 16;
/// A client that has not sent its request head by then is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `registry` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                // Over the cap: close at once rather than queue.
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    tracing::debug!(peer = %peer, "metrics: connection limit reached, closing");
                    continue;
                };
                let r = Arc::clone(&registry);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let r = Arc::clone(&r);
                        async move { Ok::<_, Infallible>(respond(&r, &req)) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_TIMEOUT)
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = conn.await {
                        tracing::debug!(peer = %peer, error = %e, "metrics: connection error");
                    }
                    drop(slot);
                });
            }
            _ = shutdown.changed() => return,
        }
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, "text/plain".parse().expect("valid header"));
    r
}

/// The answer to one request: the metrics for `GET /metrics`.
pub fn respond(registry: &Registry, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET is allowed\n");
        r.headers_mut()
            .insert(ALLOW, "GET".parse().expect("valid header"));
        return r;
    }
    if req.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "only /metrics is served here\n");
    }
    let mut r = Response::new(Full::new(Bytes::from(registry.render())));
    r.headers_mut().insert(
        CONTENT_TYPE,
        CONTENT_TYPE_OPENMETRICS.parse().expect("valid header"),
    );
    r
}
