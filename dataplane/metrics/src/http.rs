//! `GET /metrics` over HTTP/1.1, served by hyper, and the probes Kubernetes
//! asks on the same port: `GET /healthz` (the process serves) and
//! `GET /readyz` (it is ready for work, see [`Readiness`]).
//!
//! The metrics name volumes and subsystems, so a server may require
//! credentials for `/metrics` ([`ScrapeAccess`]); the probes stay open,
//! as the kubelet asks them without any.

use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
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

/// Who may read `GET /metrics`.
pub trait ScrapeAccess: Send + Sync {
    /// Whether a request whose `Authorization` header is `authorization`
    /// (`None` without one) may read the metrics.
    fn allows(&self, authorization: Option<&[u8]>) -> bool;
}

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
/// true; `/metrics` only to requests `access` allows (to all without one).
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Arc<Readiness>,
    access: Option<Arc<dyn ScrapeAccess>>,
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
                let (r, ready, access) = (Arc::clone(&registry), Arc::clone(&readiness), access.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (r, ready, access) = (Arc::clone(&r), Arc::clone(&ready), access.clone());
                        async move { Ok::<_, Infallible>(respond(&r, &ready, access.as_deref(), &req)) }
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
/// `GET /readyz` 200 "ok" when ready, else 503 with the reason. `/metrics`
/// is refused with 401 to a request `access` does not allow.
pub fn respond<B>(
    registry: &Registry,
    readiness: &Readiness,
    access: Option<&dyn ScrapeAccess>,
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
    let authorization = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
    if access.is_some_and(|a| !a.allows(authorization)) {
        let mut r = text(
            StatusCode::UNAUTHORIZED,
            "the metrics need a valid bearer token\n",
        );
        r.headers_mut()
            .insert(WWW_AUTHENTICATE, "Bearer".parse().expect("valid header"));
        return r;
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

    /// Allows exactly `Authorization: Bearer secret`.
    struct Secret;
    impl ScrapeAccess for Secret {
        fn allows(&self, authorization: Option<&[u8]>) -> bool {
            authorization == Some(b"Bearer secret".as_slice())
        }
    }

    #[test]
    fn metrics_need_what_access_allows_but_the_probes_do_not() {
        let (registry, readiness) = (Registry::new(), Readiness::new("loading"));
        readiness.ready();
        let with = |path: &str, auth: Option<&str>| {
            let mut b = Request::get(path);
            if let Some(a) = auth {
                b = b.header(AUTHORIZATION, a);
            }
            let req = b.body(()).unwrap();
            respond(&registry, &readiness, Some(&Secret), &req)
        };
        let refused = with("/metrics", None);
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(refused.headers()[WWW_AUTHENTICATE], "Bearer");
        assert_eq!(
            with("/metrics", Some("Bearer wrong")).status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            with("/metrics", Some("Bearer secret")).status(),
            StatusCode::OK
        );
        assert_eq!(with("/healthz", None).status(), StatusCode::OK);
        assert_eq!(with("/readyz", None).status(), StatusCode::OK);
        assert_eq!(
            respond(&registry, &readiness, None, &get("/metrics")).status(),
            StatusCode::OK,
            "without an access check, everyone reads"
        );
    }

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    #[test]
    fn probes_answer_from_the_readiness_flag() {
        let (registry, readiness) = (Registry::new(), Readiness::new("loading"));
        assert_eq!(
            respond(&registry, &readiness, None, &get("/readyz")).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            respond(&registry, &readiness, None, &get("/healthz")).status(),
            StatusCode::OK
        );
        readiness.ready();
        assert_eq!(
            respond(&registry, &readiness, None, &get("/readyz")).status(),
            StatusCode::OK
        );
        let post = Request::post("/readyz").body(()).unwrap();
        assert_eq!(
            respond(&registry, &readiness, None, &post).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
