//! Who may call the TCP endpoint: the holder of a shared token
//! (`--rpc-token-file`), or a Kubernetes ServiceAccount the API server
//! vouches for (`--rpc-token-audience`, what the operator configures).

use super::http::token_matches;
use super::review::Reviewer;
use super::token::Token;

/// How a caller's bearer token is checked.
pub enum CallerAuth {
    /// Equal to the token (fixed, or following its file).
    Token(Token),
    /// A ServiceAccount token reviewed by the API server.
    Review(Box<Reviewer>),
}

impl CallerAuth {
    /// Whether `bearer` (the `Authorization: Bearer` value, trimmed) lets
    /// its caller in.
    pub async fn allows(&self, bearer: &str) -> bool {
        match self {
            Self::Token(t) => token_matches(bearer.as_bytes(), t.current().as_bytes()),
            Self::Review(r) => r.allows(bearer).await,
        }
    }
}
