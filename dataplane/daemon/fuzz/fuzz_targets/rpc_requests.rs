//! Feeds arbitrary bytes to the JSON-RPC connection as the Unix socket and
//! TCP endpoints read them: values back to back, requests, notifications
//! and batches, each request's parameters parsed into its method's type
//! as the method table does before any handler runs (handlers are not run:
//! they act on files, devices and networks). Nothing may panic; every
//! answer is one JSON-RPC 2.0 response (or a batch of them), and what is
//! left buffered is an incomplete value only.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rackcache_dataplane::methods::table::find;
use rackcache_dataplane::rpc::error::{ErrorKind, RpcError};
use rackcache_dataplane::rpc::server::{answer_buffered, Dispatch};
use serde_json::Value;

/// Parses each call's parameters as the method would, then stops.
struct ParseOnly;

impl Dispatch for ParseOnly {
    async fn dispatch(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        let m = find(method).ok_or_else(|| {
            RpcError::new(
                ErrorKind::MethodNotFound,
                format!("Method not found: {method}"),
            )
        })?;
        (m.check)(params).map(|()| Value::Null)
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    })
}

fn is_response(v: &Value) -> bool {
    v.get("jsonrpc") == Some(&Value::String("2.0".into()))
        && (v.get("result").is_some() != v.get("error").is_some())
}

fuzz_target!(|data: &[u8]| {
    let mut buf = data.to_vec();
    let b = runtime().block_on(answer_buffered(&ParseOnly, &mut buf));
    for a in &b.answers {
        let v: Value = serde_json::from_slice(a).expect("an answer is JSON");
        match &v {
            Value::Array(items) => {
                assert!(!items.is_empty() && items.iter().all(is_response), "{v}")
            }
            other => assert!(is_response(other), "{v}"),
        }
    }
    if !b.end {
        // Only an incomplete value (or whitespace) may stay buffered.
        let rest = std::str::from_utf8(&buf).map(str::trim).unwrap_or("x");
        assert!(
            rest.is_empty() || serde_json::from_slice::<Value>(&buf).is_err(),
            "a complete value was left unanswered"
        );
    }
});
