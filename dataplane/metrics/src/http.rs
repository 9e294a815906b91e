//! `GET /metrics` over HTTP/1.1, served by hyper, and the probes Kubernetes
//! asks on the same port: `GET /healthz` (the process serves) and
//! `GET /readyz` (it is ready for work, see [`Readiness`]).

use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
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

/// Whether the process is ready for work, for `GET /readyz`: not ready,
/// with a short reason, until the process says it is (a dataplane is
/// ready once its start-up configuration is applied and its RPC servers
/// listen: before, the operator could not reach it or would see a
/// half-loaded state).
pub struct Readiness {
    not_ready: RwLock<Option<String>>,
}

impl Readiness {
    /// Not ready yet, because of `reason`.
    pub fn new(reason: &str) -> Arc<Self> {
        Arc::new(Self {
            not_ready: RwLock::new(Some(reason.to_owned())),
        })
    }

    /// Still not ready, now because of `reason`.
    pub fn not_ready(&self, reason: &str) {
        *self.not_ready.write().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_owned());
    }

    /// Ready.
    pub fn ready(&self) {
        *self.not_ready.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), String> {
        match &*self.not_ready.read().unwrap_or_else(|e| e.into_inner()) {
            None => Ok(()),
            Some(reason) => Err(reason.clone()),
        }
    }
}

/// Serves `registry` and the probes on `listener` until `shutdown` turns
/// true.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Arc<Readiness>,
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
                let (r, ready) = (Arc::clone(&registry), Arc::clone(&readiness));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (r, ready) = (Arc::clone(&r), Arc::clone(&ready));
                        async move { Ok::<_, Infallible>(respond(&r, &ready, &req)) }
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

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, "text/plain".parse().expect("valid header"));
    r
}

/// The answer to one request: the metrics for `GET /metrics`; for
/// `GET /healthz` 200 "ok" (answering at all is the proof of life); for
/// `GET /readyz` 200 "ok" when ready, else 503 with the reason.
pub fn respond<B>(
    registry: &Registry,
    readiness: &Readiness,
    req: &Request<B>,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET is allowed\n");
        r.headers_mut()
            .insert(ALLOW, "GET".parse().expect("valid header"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => {}
        "/healthz" => return text(StatusCode::OK, "ok\n"),
        "/readyz" => {
            return match readiness.check() {
                Ok(()) => text(StatusCode::OK, "ok\n"),
                Err(reason) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {reason}\n"),
                ),
            }
        }
        _ => {
            return text(
                StatusCode::NOT_FOUND,
                "only /metrics, /healthz and /readyz are served here\n",
            )
        }
    }
    let mut r = Response::new(Full::new(Bytes::from(registry.render())));
    r.headers_mut().insert(
        CONTENT_TYPE,
        CONTENT_TYPE_OPENMETRICS.parse().expect("valid header"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    #[test]
    fn probes_answer_from_the_readiness_flag() {
        let (registry, readiness) = (Registry::new(), Readiness::new("loading"));
        assert_eq!(
            respond(&registry, &readiness, &get("/readyz")).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            respond(&registry, &readiness, &get("/healthz")).status(),
            StatusCode::OK
        );
        readiness.ready();
        assert_eq!(
            respond(&registry, &readiness, &get("/readyz")).status(),
            StatusCode::OK
        );
        let post = Request::post("/readyz").body(()).unwrap();
        assert_eq!(
            respond(&registry, &readiness, &post).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
