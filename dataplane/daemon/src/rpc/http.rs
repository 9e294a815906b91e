//! JSON-RPC over HTTP on TCP, for the operator: `POST /` with the request as
//! the body and `Authorization: Bearer <token>`, over TLS unless the
//! operator explicitly chose plain HTTP (`--rpc-insecure`, for tests). The
//! Unix socket needs no token (filesystem permissions guard it).
//!
//! What bounds a caller: until its token is checked (from the request
//! head, before a byte of the body is read) a connection only holds a
//! place at the port's [`Gate`]: at most
//! [`TcpOptions::max_unauthenticated_per_peer`] per peer address (more are
//! closed at accept) and [`TcpOptions::max_unauthenticated`] in all (at
//! which the oldest is closed to make room). The head must arrive within
//! [`TcpOptions::header_timeout`] (the TLS handshake too). Only an
//! authenticated request takes one of [`TcpOptions::max_connections`]
//! slots (503 when all are taken), so no one without the token can keep
//! the operator out. The body is limited to [`MAX_BODY`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use gate::{Gate, Pass, PeerLog};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{
    ALLOW, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::auth::CallerAuth;
use super::error::{ErrorKind, RpcError};
use super::server::{handle_value, Dispatch};
use super::tls::ServerTls;
use super::token::Token;

/// Largest request body (a `load_subsystem_config` of many subsystems fits).
pub const MAX_BODY: usize = 32 << 20;
/// A body must arrive within this once its head was accepted.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// How the TCP endpoint serves.
#[derive(Clone)]
pub struct TcpOptions {
    /// How callers' bearer tokens are checked.
    pub auth: Arc<CallerAuth>,
    /// TLS (the certificate follows its files); `None` serves plain HTTP
    /// (only with `--rpc-insecure`).
    pub tls: Option<ServerTls>,
    /// Authenticated requests served at once; more are answered 503.
    pub max_connections: usize,
    /// Connections not yet authenticated, in all; at the cap the oldest
    /// is closed to make room.
    pub max_unauthenticated: u32,
    /// Connections not yet authenticated from one peer address; more are
    /// closed when accepted.
    pub max_unauthenticated_per_peer: u32,
    /// Time for the TLS handshake and for the request head.
    pub header_timeout: Duration,
}

impl TcpOptions {
    /// The daemon's defaults: the operator opens a handful of connections.
    pub fn new(token: String, tls: Option<ServerTls>) -> Self {
        Self::with_token(Token::fixed(token), tls)
    }

    /// The daemon's defaults with `token` (e.g. [`Token::from_file`]).
    pub fn with_token(token: Token, tls: Option<ServerTls>) -> Self {
        Self::with_auth(CallerAuth::Token(token), tls)
    }

    /// The daemon's defaults with callers checked by `auth`.
    pub fn with_auth(auth: CallerAuth, tls: Option<ServerTls>) -> Self {
        Self {
            auth: Arc::new(auth),
            tls,
            max_connections: 64,
            max_unauthenticated: 64,
            max_unauthenticated_per_peer: 8,
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// How long the accept loop waits after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Serves until `shutdown` turns true.
pub async fn serve_tcp<D: Dispatch>(
    listener: TcpListener,
    options: TcpOptions,
    dispatcher: Arc<D>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(options.max_connections));
    let gate = Gate::new(
        options.max_unauthenticated,
        options.max_unauthenticated_per_peer,
    );
    let log = Arc::new(PeerLog::default());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and the like persist until something
                        // closes: retrying at once would spin a CPU (the
                        // NVMe/TCP accept loop waits the same).
                        tracing::warn!(error = %e, "rpc over tcp: accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                // Over the peer's cap: close now rather than queue.
                let pass = match gate.admit(peer.ip()) {
                    Ok(p) => p,
                    Err(why) => {
                        if log.allow(peer.ip()) {
                            tracing::warn!(peer = %peer, "rpc over tcp: connection refused: {why}");
                        }
                        continue;
                    }
                };
                let evicted = pass.eviction();
                let conn = Arc::new(Caller {
                    peer,
                    pass: Mutex::new(Some(pass)),
                    slot: Mutex::new(None),
                    slots: Arc::clone(&slots),
                    log: Arc::clone(&log),
                });
                let (o, d) = (options.clone(), Arc::clone(&dispatcher));
                tokio::spawn(async move {
                    let served = async {
                        match &o.tls {
                            Some(tls) => match tokio::time::timeout(o.header_timeout, tls.accept(stream)).await {
                                Ok(Ok(s)) => serve_connection(s, &o, d, Arc::clone(&conn)).await,
                                Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
                                Err(_) => Err("TLS handshake timed out".to_owned()),
                            },
                            None => serve_connection(stream, &o, d, Arc::clone(&conn)).await,
                        }
                    };
                    // A caller told to make room before it authenticated
                    // is closed; once authenticated it is never told.
                    let r = tokio::select! {
                        r = served => r,
                        _ = evicted.notified() => Err("closed to make room: max_unauthenticated connections wait to authenticate".to_owned()),
                    };
                    if let Err(e) = r {
                        tracing::debug!(peer = %peer, error = %e, "rpc over tcp: connection ended");
                    }
                });
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// One TCP caller: its place at the gate until its token checks out, then
/// one of the authenticated slots.
struct Caller {
    peer: SocketAddr,
    pass: Mutex<Option<Pass>>,
    slot: Mutex<Option<OwnedSemaphorePermit>>,
    slots: Arc<Semaphore>,
    log: Arc<PeerLog>,
}

impl Caller {
    /// Trades the place at the gate for an authenticated slot; false when
    /// all are taken.
    fn authenticated(&self) -> bool {
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            return false;
        };
        *self.slot.lock().expect("caller slot") = Some(slot);
        self.pass.lock().expect("caller pass").take();
        true
    }
}

async fn serve_connection<S, D>(
    stream: S,
    o: &TcpOptions,
    d: Arc<D>,
    caller: Arc<Caller>,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    D: Dispatch,
{
    let auth = Arc::clone(&o.auth);
    let service = hyper::service::service_fn(move |req| {
        let (a, d, c) = (Arc::clone(&auth), Arc::clone(&d), Arc::clone(&caller));
        async move { Ok::<_, Infallible>(handle(req, &a, d.as_ref(), &c).await) }
    });
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(o.header_timeout)
        // One request per connection: an idle keep-alive connection would
        // hold one of the capped slots with no head timer running.
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service)
        .await
        .map_err(|e| e.to_string())
}

/// Compares in constant time for tokens of the given length; a different
/// length never matches (only the length can be learnt from timing).
pub fn token_matches(given: &[u8], want: &[u8]) -> bool {
    given.ct_eq(want).into()
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

/// A plain-text refusal with one header that says what to do next.
fn refusal(
    status: StatusCode,
    text: &str,
    (name, value): (hyper::header::HeaderName, &'static str),
) -> Response<Full<Bytes>> {
    let mut r = reply(status, "text/plain", format!("{text}\n").into_bytes());
    r.headers_mut()
        .insert(name, hyper::header::HeaderValue::from_static(value));
    r
}

async fn handle<D: Dispatch>(
    req: Request<Incoming>,
    auth: &CallerAuth,
    d: &D,
    caller: &Caller,
) -> Response<Full<Bytes>> {
    // Only the head has been read so far: refuse before reading the body.
    let bearer = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let authorized = match bearer {
        Some(t) => auth.allows(t.trim()).await,
        None => false,
    };
    if !authorized {
        if caller.log.allow(caller.peer.ip()) {
            tracing::warn!(peer = %caller.peer, path = %req.uri().path(), "rpc over tcp: request without a valid token refused");
        }
        return refusal(
            StatusCode::UNAUTHORIZED,
            "a valid bearer token is required",
            (WWW_AUTHENTICATE, "Bearer"),
        );
    }
    if !caller.authenticated() {
        tracing::warn!(peer = %caller.peer, "rpc over tcp: all authenticated slots busy, answered 503");
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "all request slots are busy; retry",
            (RETRY_AFTER, "1"),
        );
    }
    if req.method() != Method::POST || req.uri().path() != "/" {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            b"POST / only\n".to_vec(),
        );
        r.headers_mut()
            .insert(ALLOW, "POST".parse().expect("valid header"));
        return r;
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return reply(
            StatusCode::PAYLOAD_TOO_LARGE,
            "text/plain",
            format!("the body is limited to {MAX_BODY} bytes\n").into_bytes(),
        );
    }
    let body = Limited::new(req.into_body(), MAX_BODY).collect();
    let body = match tokio::time::timeout(BODY_TIMEOUT, body).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            return reply(
                StatusCode::BAD_REQUEST,
                "text/plain",
                format!("read body: {e}\n").into_bytes(),
            )
        }
        Err(_) => {
            return reply(
                StatusCode::REQUEST_TIMEOUT,
                "text/plain",
                b"the body did not arrive in time\n".to_vec(),
            )
        }
    };
    let response = match serde_json::from_slice::<Value>(&body) {
        Ok(v) => handle_value(d, v).await,
        Err(e) => Some(super::server::error_response(
            Value::Null,
            &RpcError::new(ErrorKind::Parse, format!("Parse error: {e}")),
        )),
    };
    match response {
        Some(v) => match serde_json::to_vec(&v) {
            Ok(body) => reply(StatusCode::OK, "application/json", body),
            Err(e) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("encode answer: {e}\n").into_bytes(),
            ),
        },
        // A notification: nothing to return.
        None => reply(StatusCode::NO_CONTENT, "application/json", Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::token_matches;

    #[test]
    fn tokens() {
        assert!(token_matches(b"secret", b"secret"));
        assert!(!token_matches(b"secreT", b"secret"));
        assert!(!token_matches(b"secret-and-more", b"secret"));
        assert!(!token_matches(b"", b"secret"));
        assert!(!token_matches(b"sec", b"secret"));
    }

    /// The old comparison truncated the length difference to 8 bits and
    /// compared only the expected length's bytes: the right token followed
    /// by exactly 256 (or 512, ...) more bytes was accepted.
    #[test]
    fn the_token_followed_by_256_bytes_is_refused() {
        let want = b"0123456789abcdef-test-token";
        for extra in [256usize, 512, 1024] {
            let mut given = want.to_vec();
            given.extend(std::iter::repeat_n(b'x', extra));
            assert!(!token_matches(&given, want), "{extra} extra bytes accepted");
        }
    }
}
