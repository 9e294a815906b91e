//! Callers proven by Kubernetes: the bearer token is a ServiceAccount token
//! that the API server vouches for with a TokenReview.
//!
//! Under the operator each cache server has an audience of its own
//! (`--rpc-token-audience`, naming the pool and the node) and accepts one
//! caller (`--rpc-allowed-caller`, the operator's ServiceAccount). The
//! operator mints short-lived tokens for that audience with a
//! TokenRequest and never stores them, so no Secret holds a credential of
//! the RPC port, and a token a server sees is refused by every other
//! server.
//!
//! What a caller without a valid token can cost: a token whose unverified
//! claims name another audience or caller, or that has expired, is refused
//! without asking the API server. Claims are easy to forge, so reviews run
//! one at a time with a deadline ([`REVIEW_TIMEOUT`]): forged tokens slow
//! the operator's next new token at worst, never reach the API server in
//! parallel, and never take an authenticated slot. A token the API server
//! accepted is remembered (by its SHA-256) for [`REMEMBER`] or until it
//! expires, whichever is first, so the operator's calls do not each cost a
//! review and a revoked ServiceAccount is refused within that time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use serde::Deserialize;
use serde_json::json;
use tokio_rustls::rustls;

use super::token::Token;

/// How long one TokenReview may take, connection included.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an accepted token is accepted without asking again.
pub const REMEMBER: Duration = Duration::from_secs(60);
/// Accepted tokens remembered at most (the operator holds one at a time
/// per server; the bound only matters if something else gets through).
const REMEMBERED_MAX: usize = 64;
/// The largest TokenReview answer read.
const MAX_ANSWER: usize = 1 << 20;

/// Where the API server is and how to prove who this server is to it.
#[derive(Debug, Clone)]
pub struct ApiAccess {
    /// `https://host:port` of the API server.
    pub url: String,
    /// PEM CA bundle the API server's certificate must chain to.
    pub ca_file: PathBuf,
    /// This server's own ServiceAccount token (the kubelet refreshes it;
    /// it is read again when it changes).
    pub token_file: PathBuf,
}

/// What a caller's token must prove.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// An audience the token must be issued for.
    pub audience: String,
    /// The username the API server must report
    /// (`system:serviceaccount:<namespace>:<name>`).
    pub caller: String,
}

/// Checks callers' tokens with TokenReviews.
pub struct Reviewer {
    host: String,
    port: u16,
    tls: tokio_rustls::TlsConnector,
    own_token: Token,
    want: Expectation,
    /// SHA-256 of accepted tokens, with when to stop accepting them.
    accepted: Mutex<HashMap<[u8; 32], Instant>>,
    /// One review at a time.
    reviewing: tokio::sync::Mutex<()>,
    /// When a failing API server was last reported (the log is bounded).
    last_warning: Mutex<Option<Instant>>,
}

impl Reviewer {
    /// A reviewer for `want`, asking the API server at `api`. Fails when
    /// the URL, the CA bundle or the own token is unusable.
    pub fn new(api: &ApiAccess, want: Expectation) -> Result<Self, String> {
        let (host, port) = parse_url(&api.url)?;
        let tls = client_tls(&api.ca_file)?;
        let own_token = Token::from_file(&api.token_file)
            .map_err(|e| format!("the server's own ServiceAccount token: {e}"))?;
        if want.audience.is_empty() || want.caller.is_empty() {
            return Err("a token review needs an audience and an allowed caller".to_owned());
        }
        Ok(Self {
            host,
            port,
            tls,
            own_token,
            want,
            accepted: Mutex::new(HashMap::new()),
            reviewing: tokio::sync::Mutex::new(()),
            last_warning: Mutex::new(None),
        })
    }

    /// Whether `token` proves the expected caller for the expected audience.
    pub async fn allows(&self, token: &str) -> bool {
        let Some(valid_for) = plausible(&self.want, token, unix_now()) else {
            return false;
        };
        let expires = Instant::now() + valid_for;
        let key = digest(token);
        if self.remembered(&key) {
            return true;
        }
        let Ok(_turn) = tokio::time::timeout(REVIEW_TIMEOUT, self.reviewing.lock()).await else {
            return false;
        };
        // Another caller may have had the same token reviewed meanwhile.
        if self.remembered(&key) {
            return true;
        }
        match tokio::time::timeout(REVIEW_TIMEOUT, self.review(token)).await {
            Ok(Ok(true)) => {
                self.remember(key, expires);
                true
            }
            Ok(Ok(false)) => false,
            Ok(Err(e)) => {
                self.warn(&e);
                false
            }
            Err(_) => {
                self.warn("the API server did not answer in time");
                false
            }
        }
    }

    fn remembered(&self, key: &[u8; 32]) -> bool {
        let mut accepted = self.accepted.lock().expect("accepted tokens");
        let now = Instant::now();
        accepted.retain(|_, until| *until > now);
        accepted.contains_key(key)
    }

    fn remember(&self, key: [u8; 32], until: Instant) {
        let mut accepted = self.accepted.lock().expect("accepted tokens");
        if accepted.len() >= REMEMBERED_MAX {
            accepted.clear();
        }
        accepted.insert(key, until);
    }

    /// Reports an unusable API server at most every [`REMEMBER`].
    fn warn(&self, error: &str) {
        let mut last = self.last_warning.lock().expect("last warning");
        if last.is_some_and(|t| t.elapsed() < REMEMBER) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(api = %format!("{}:{}", self.host, self.port), error, "token review failed; callers are refused until it works");
    }

    /// Asks the API server; `Ok(false)` when it does not vouch for the token
    /// as the expected caller and audience.
    async fn review(&self, token: &str) -> Result<bool, String> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let name = ServerName::try_from(self.host.clone())
            .map_err(|e| format!("server name {}: {e}", self.host))?;
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
        tokio::spawn(conn);
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.want.audience]},
        });
        let req = Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
            .header(HOST, format!("{}:{}", self.host, self.port))
            .header(
                AUTHORIZATION,
                format!("Bearer {}", self.own_token.current()),
            )
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| format!("request: {e}"))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("read the answer: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ));
        }
        let review: TokenReview =
            serde_json::from_slice(&body).map_err(|e| format!("parse the answer: {e}"))?;
        Ok(self.vouched(&review.status))
    }

    fn vouched(&self, s: &ReviewStatus) -> bool {
        s.authenticated
            && s.user.username == self.want.caller
            && s.audiences.contains(&self.want.audience)
    }
}

#[derive(Deserialize)]
struct TokenReview {
    #[serde(default)]
    status: ReviewStatus,
}

#[derive(Deserialize, Default)]
struct ReviewStatus {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: ReviewUser,
    #[serde(default)]
    audiences: Vec<String>,
}

#[derive(Deserialize, Default)]
struct ReviewUser {
    #[serde(default)]
    username: String,
}

/// A JWT's claims that matter here, read without checking the signature.
struct Claims {
    sub: String,
    aud: Vec<String>,
    exp: u64,
}

/// The token's unverified claims at `now` (Unix seconds): `None` unless
/// they name the expected audience and caller and are not expired; else
/// how long an accepted token may be remembered.
fn plausible(want: &Expectation, token: &str, now: u64) -> Option<Duration> {
    let c = claims(token)?;
    if c.sub != want.caller || !c.aud.contains(&want.audience) || c.exp <= now {
        return None;
    }
    Some(REMEMBER.min(Duration::from_secs(c.exp - now)))
}

fn claims(token: &str) -> Option<Claims> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Audience {
        One(String),
        Many(Vec<String>),
    }
    #[derive(Deserialize)]
    struct Raw {
        sub: String,
        aud: Audience,
        exp: u64,
    }
    let payload = token.split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let raw: Raw = serde_json::from_slice(&json).ok()?;
    let aud = match raw.aud {
        Audience::One(a) => vec![a],
        Audience::Many(a) => a,
    };
    Some(Claims {
        sub: raw.sub,
        aud,
        exp: raw.exp,
    })
}

fn digest(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `https://host:port` (a bracketed IPv6 host allowed) into host and port,
/// read by hyper's URI parser.
fn parse_url(url: &str) -> Result<(String, u16), String> {
    let bad = || format!("API server URL {url:?}: want https://host:port");
    let uri: hyper::Uri = url.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("https") {
        return Err(bad());
    }
    let host = uri.host().ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match (host.is_empty(), uri.port_u16()) {
        (false, Some(port)) => Ok((host.to_owned(), port)),
        _ => Err(bad()),
    }
}

fn client_tls(ca_file: &Path) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls_pki_types::{pem::PemObject, CertificateDer};
    let pem = std::fs::read(ca_file)
        .map_err(|e| format!("read the API server's CA {}: {e}", ca_file.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("CA {}: {e}", ca_file.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("CA {}: {e}", ca_file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("CA {} holds no certificate", ca_file.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// In a pod: the API server the kubelet names in the environment.
pub fn in_cluster_url() -> Option<String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").ok()?;
    Some(if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: serde_json::Value) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.sig",
            b64.encode(br#"{"alg":"RS256"}"#),
            b64.encode(claims.to_string())
        )
    }

    #[test]
    fn claims_read_one_or_many_audiences_and_refuse_garbage() {
        let c = claims(&jwt(json!({"sub": "s", "aud": "a", "exp": 5}))).unwrap();
        assert_eq!(
            (c.sub.as_str(), c.aud, c.exp),
            ("s", vec!["a".to_owned()], 5)
        );
        let c = claims(&jwt(json!({"sub": "s", "aud": ["a", "b"], "exp": 5}))).unwrap();
        assert_eq!(c.aud, ["a", "b"]);
        assert!(claims("not-a-jwt").is_none());
        assert!(claims("a.!!!.c").is_none());
        assert!(claims(&jwt(json!({"sub": "s", "exp": 5}))).is_none());
    }

    #[test]
    fn only_the_expected_caller_and_audience_before_expiry_are_worth_a_review() {
        let want = Expectation {
            audience: "aud-a".to_owned(),
            caller: "system:serviceaccount:ns:op".to_owned(),
        };
        let token =
            |sub: &str, aud: &str, exp: u64| jwt(json!({"sub": sub, "aud": [aud], "exp": exp}));
        let op = "system:serviceaccount:ns:op";
        assert_eq!(
            plausible(&want, &token(op, "aud-a", 1_000), 990),
            Some(Duration::from_secs(10)),
            "remembered no longer than the token lives"
        );
        assert_eq!(
            plausible(&want, &token(op, "aud-a", 10_000), 990),
            Some(REMEMBER)
        );
        assert_eq!(
            plausible(&want, &token(op, "aud-b", 10_000), 990),
            None,
            "another server's"
        );
        assert_eq!(
            plausible(
                &want,
                &token("system:serviceaccount:ns:x", "aud-a", 10_000),
                990
            ),
            None,
            "another caller"
        );
        assert_eq!(
            plausible(&want, &token(op, "aud-a", 990), 990),
            None,
            "expired"
        );
    }

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("https://127.0.0.1:6443").unwrap(),
            ("127.0.0.1".to_owned(), 6443)
        );
        assert_eq!(
            parse_url("https://[fd00::1]:443/").unwrap(),
            ("fd00::1".to_owned(), 443)
        );
        for bad in ["http://a:1", "https://a", "https://:1", "https://a:x"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
