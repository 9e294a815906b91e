//! Parameters as every method takes them: an object parsed into the
//! method's type, unknown members refused.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::rpc::error::RpcError;

/// Parses params into `T`, which should `deny_unknown_fields`; absent params
/// parse as `{}`.
pub(crate) fn parse<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    serde_json::from_value(params.unwrap_or_else(|| Value::Object(Default::default())))
        .map_err(RpcError::invalid_params)
}

/// For methods that take no parameters.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoParams {}
