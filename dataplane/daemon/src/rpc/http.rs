//! JSON-RPC over HTTP on TCP, for the operator: `POST /` with the request as
//! the body and `Authorization: Bearer <token>`. The Unix socket needs no
//! token (filesystem permissions guard it); this endpoint refuses every
//! request without the right token, before looking at the body.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::error::{RpcError, PARSE_ERROR};
use super::server::{handle_value, Dispatch};

const MAX_HEAD: usize = 16 << 10;
const MAX_BODY: usize = 32 << 20;

/// Serves until `shutdown` turns true.
pub async fn serve_tcp<D: Dispatch>(
    listener: TcpListener,
    token: Arc<String>,
    dispatcher: Arc<D>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, peer)) = accepted {
                    let (t, d) = (Arc::clone(&token), Arc::clone(&dispatcher));
                    tokio::spawn(async move {
                        let r = tokio::time::timeout(Duration::from_secs(300), handle(stream, &t, d.as_ref())).await;
                        if let Ok(Err(e)) = r {
                            tracing::debug!(peer = %peer, error = %e, "rpc over tcp: connection error");
                        }
                    });
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Compares without an early exit, so response timing does not reveal how
/// much of a guessed token was right.
fn token_matches(given: &[u8], want: &[u8]) -> bool {
    let mut diff = (given.len() ^ want.len()) as u8;
    for (i, w) in want.iter().enumerate() {
        diff |= w ^ given.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

async fn handle<D: Dispatch>(mut stream: TcpStream, token: &str, d: &D) -> std::io::Result<()> {
    let req = match httpd::read_request(&mut stream, MAX_HEAD, MAX_BODY).await {
        Ok(r) => r,
        Err(e) => {
            if let Some(status) = e.status() {
                httpd::respond(&mut stream, status, "text/plain", &[], b"bad request\n").await?;
            }
            return Ok(());
        }
    };
    let authorized = req
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| token_matches(t.trim().as_bytes(), token.as_bytes()));
    if !authorized {
        tracing::warn!(path = %req.path, "rpc over tcp: request without a valid token refused");
        return httpd::respond(
            &mut stream,
            "401 Unauthorized",
            "text/plain",
            &[("WWW-Authenticate", "Bearer")],
            b"a valid bearer token is required\n",
        )
        .await;
    }
    if req.method != "POST" || req.path != "/" {
        return httpd::respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            &[("Allow", "POST")],
            b"POST / only\n",
        )
        .await;
    }
    let response = match serde_json::from_slice::<Value>(&req.body) {
        Ok(v) => handle_value(d, v).await,
        Err(e) => Some(super::server::error_response(
            Value::Null,
            &RpcError::new(PARSE_ERROR, format!("Parse error: {e}")),
        )),
    };
    match response {
        Some(v) => {
            let body = serde_json::to_vec(&v)?;
            httpd::respond(&mut stream, "200 OK", "application/json", &[], &body).await
        }
        // A notification: nothing to return.
        None => httpd::respond(&mut stream, "204 No Content", "application/json", &[], b"").await,
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
}
