//! JSON-RPC 2.0 over a Unix stream socket, framed as SPDK frames it: JSON
//! values back to back on the stream, with no delimiter, so the request
//! decoder must find where each value ends.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use super::error::{ErrorKind, RpcError};

/// Requests larger than this end the connection (a client sending garbage
/// must not make us buffer without bound).
const MAX_REQUEST_BYTES: usize = 32 << 20;

/// Executes one method call.
pub trait Dispatch: Send + Sync + 'static {
    /// Runs `method` with `params` (absent params arrive as `None`).
    fn dispatch(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> impl Future<Output = Result<Value, RpcError>> + Send;

    /// Whether a successful call of `method` may have changed the state
    /// (the daemon's method table says). By default every call counts as
    /// a change: a needless [`Self::changed`] is harmless, a missed one is
    /// not.
    fn changes_state(&self, _method: &str) -> bool {
        true
    }

    /// Called after a call that may have changed the state succeeded
    /// ([`Self::changes_state`]): the daemon rewrites `--config-persist`
    /// here.
    fn changed(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Binds the socket at `path`, replacing a stale socket file left by a
/// previous run but refusing to steal one that a live process still serves.
pub async fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is served by another process", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let listener = UnixListener::bind(path)?;
    // Only the owner (root, in a deployment) may drive the dataplane here;
    // remote callers go through the token-protected TCP endpoint.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves connections until `shutdown` turns true, then removes the socket.
pub async fn serve_unix<D: Dispatch>(
    listener: UnixListener,
    path: PathBuf,
    dispatcher: Arc<D>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let d = Arc::clone(&dispatcher);
                    let sd = shutdown.clone();
                    tokio::spawn(async move {
                        if let Err(e) = serve_connection(stream, d, sd).await {
                            tracing::debug!(error = %e, "rpc connection ended");
                        }
                    });
                }
                Err(e) => tracing::warn!(error = %e, "rpc accept failed"),
            },
            _ = shutdown.changed() => break,
        }
    }
    let _ = std::fs::remove_file(&path);
}

async fn serve_connection<D: Dispatch>(
    mut stream: UnixStream,
    dispatcher: Arc<D>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        // Answer every complete value already buffered.
        let b = answer_buffered(dispatcher.as_ref(), &mut buf).await;
        for a in &b.answers {
            stream.write_all(a).await?;
        }
        if b.end {
            // After a parse error the stream cannot be resynchronised.
            return Ok(());
        }
        if buf.len() > MAX_REQUEST_BYTES {
            let e = RpcError::new(ErrorKind::InvalidRequest, "request too large");
            let _ = stream
                .write_all(&serde_json::to_vec(&error_response(Value::Null, &e))?)
                .await;
            return Ok(());
        }
        let n = tokio::select! {
            r = stream.read(&mut chunk) => r?,
            _ = shutdown.changed() => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// What the bytes buffered on a connection call for.
pub struct Buffered {
    /// Answers to write, in order (each one JSON value).
    pub answers: Vec<Vec<u8>>,
    /// The last answer was a parse error: the connection ends after it.
    pub end: bool,
}

/// Answers every complete JSON-RPC value at the front of `buf` (requests,
/// notifications, batches) and removes it, leaving an incomplete value's
/// bytes for more to arrive.
pub async fn answer_buffered<D: Dispatch>(d: &D, buf: &mut Vec<u8>) -> Buffered {
    let mut answers = Vec::new();
    loop {
        match next_value(buf) {
            Decoded::Value(v, used) => {
                buf.drain(..used);
                if let Some(resp) = handle_value(d, v).await {
                    answers.push(line(&resp));
                }
            }
            Decoded::Incomplete => {
                return Buffered {
                    answers,
                    end: false,
                }
            }
            Decoded::Invalid(msg) => {
                let resp = error_response(Value::Null, &RpcError::new(ErrorKind::Parse, msg));
                // As before: the parse error goes out without a newline.
                answers.push(serde_json::to_vec(&resp).unwrap_or_default());
                return Buffered { answers, end: true };
            }
        }
    }
}

/// `v` as one line.
fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out
}

enum Decoded {
    Value(Value, usize),
    Incomplete,
    Invalid(String),
}

/// Finds the first complete JSON value in `buf`.
fn next_value(buf: &[u8]) -> Decoded {
    let start = buf.iter().position(|b| !b.is_ascii_whitespace());
    let Some(start) = start else {
        return Decoded::Incomplete;
    };
    let mut stream = serde_json::Deserializer::from_slice(&buf[start..]).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v)) => Decoded::Value(v, start + stream.byte_offset()),
        Some(Err(e)) if e.is_eof() => Decoded::Incomplete,
        Some(Err(e)) => Decoded::Invalid(format!("Parse error: {e}")),
        None => Decoded::Incomplete,
    }
}

/// Handles a request or a batch; `None` when nothing is to be sent back
/// (notifications).
pub(crate) async fn handle_value<D: Dispatch>(d: &D, v: Value) -> Option<Value> {
    match v {
        Value::Array(items) if !items.is_empty() => {
            let mut out = Vec::new();
            for item in items {
                if let Some(r) = handle_request(d, item).await {
                    out.push(r);
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        Value::Array(_) => Some(error_response(
            Value::Null,
            &RpcError::new(ErrorKind::InvalidRequest, "Invalid request: empty batch"),
        )),
        other => handle_request(d, other).await,
    }
}

async fn handle_request<D: Dispatch>(d: &D, v: Value) -> Option<Value> {
    let Value::Object(mut req) = v else {
        return Some(error_response(
            Value::Null,
            &RpcError::new(ErrorKind::InvalidRequest, "Invalid request: not an object"),
        ));
    };
    let id = req.remove("id");
    let invalid = |msg: &str| {
        Some(error_response(
            id.clone().unwrap_or(Value::Null),
            &RpcError::new(ErrorKind::InvalidRequest, format!("Invalid request: {msg}")),
        ))
    };
    if req.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return invalid("jsonrpc must be \"2.0\"");
    }
    let Some(Value::String(method)) = req.remove("method") else {
        return invalid("method must be a string");
    };
    let params = req.remove("params");
    if let Some(p) = &params {
        if !p.is_object() && !p.is_null() {
            return invalid("params must be an object");
        }
    }
    let params = params.filter(|p| !p.is_null());
    if let Some(extra) = req.keys().find(|k| *k != "jsonrpc") {
        let msg = format!("unknown member {extra}");
        return invalid(&msg);
    }
    if let Some(i) = &id {
        if !(i.is_number() || i.is_string() || i.is_null()) {
            return invalid("id must be a number, a string or null");
        }
    }
    let result = d.dispatch(&method, params).await;
    match &result {
        Err(e) => {
            tracing::info!(method = %method, code = e.code(), error = %e.message, "rpc failed")
        }
        Ok(_) if d.changes_state(&method) => d.changed().await,
        Ok(_) => {}
    }
    // A request without an id is a notification: no response.
    let id = id?;
    Some(match result {
        Ok(v) => json!({ "jsonrpc": "2.0", "id": id, "result": v }),
        Err(e) => error_response(id, &e),
    })
}

pub(crate) fn error_response(id: Value, e: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": e.to_json() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoder_finds_values_back_to_back() {
        let buf = b"  {\"a\": 1}{\"b\":\n 2}{\"c\"";
        let Decoded::Value(v, used) = next_value(buf) else {
            panic!()
        };
        assert_eq!(v, json!({"a": 1}));
        let rest = &buf[used..];
        let Decoded::Value(v, used2) = next_value(rest) else {
            panic!()
        };
        assert_eq!(v, json!({"b": 2}));
        assert!(matches!(next_value(&rest[used2..]), Decoded::Incomplete));
        assert!(matches!(next_value(b"{\"a\" 1}"), Decoded::Invalid(_)));
        assert!(matches!(next_value(b"   "), Decoded::Incomplete));
    }

    struct Echo;
    impl Dispatch for Echo {
        async fn dispatch(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
            match method {
                "echo" => Ok(params.unwrap_or(Value::Null)),
                _ => Err(RpcError::new(
                    super::super::error::ErrorKind::MethodNotFound,
                    "Method not found",
                )),
            }
        }
    }

    #[tokio::test]
    async fn requests_notifications_batches_and_invalid_requests() {
        let r = handle_value(
            &Echo,
            json!({"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":1}}),
        )
        .await;
        assert_eq!(r, Some(json!({"jsonrpc":"2.0","id":1,"result":{"x":1}})));
        assert_eq!(
            handle_value(&Echo, json!({"jsonrpc":"2.0","method":"echo"})).await,
            None
        );
        let r = handle_value(&Echo, json!({"jsonrpc":"2.0","id":"a","method":"nope"}))
            .await
            .unwrap();
        assert_eq!(r["error"]["code"], -32601);
        let r = handle_value(&Echo, json!({"jsonrpc":"1.0","id":2,"method":"echo"}))
            .await
            .unwrap();
        assert_eq!(r["error"]["code"], -32600);
        let r = handle_value(
            &Echo,
            json!({"jsonrpc":"2.0","id":3,"method":"echo","params":[1]}),
        )
        .await
        .unwrap();
        assert_eq!(r["error"]["code"], -32600);
        let r = handle_value(
            &Echo,
            json!([{"jsonrpc":"2.0","id":1,"method":"echo","params":{}},{"jsonrpc":"2.0","method":"echo"}]),
        )
        .await
        .unwrap();
        assert_eq!(r.as_array().unwrap().len(), 1);
    }
}
