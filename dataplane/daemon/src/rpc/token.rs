//! The TCP endpoint's bearer token, following its file.
//!
//! Under the operator the token comes from a Secret volume; rotating it
//! (a new Secret, the kubelet's `..data` symlink flip) must not need a
//! restart of every cache server. [`Token::current`] looks at the file
//! again before checking a request, at most once per
//! [`super::tls::CHECK_INTERVAL`], and switches when its content changed
//! and the new token is usable. A replacement that is not (unreadable,
//! shorter than [`MIN_LEN`]) is refused with a warning and the previous
//! token stays: a half-written Secret must not lock the operator out, nor
//! let everyone in.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::tls::CHECK_INTERVAL;

/// The shortest token accepted: an empty one would let anyone in.
pub const MIN_LEN: usize = 16;

/// A bearer token: fixed, or read from a file that may change.
pub struct Token {
    file: Option<PathBuf>,
    state: Mutex<State>,
    interval: Duration,
}

struct State {
    token: Arc<String>,
    next_check: Instant,
}

impl Token {
    /// A token that never changes.
    pub fn fixed(token: String) -> Self {
        Self {
            file: None,
            state: Mutex::new(State {
                token: Arc::new(token),
                next_check: Instant::now(),
            }),
            interval: CHECK_INTERVAL,
        }
    }

    /// The token in `path` (trimmed), followed as it changes.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        Self::from_file_every(path, CHECK_INTERVAL)
    }

    /// [`Token::from_file`], looking at the file at most every `interval`.
    pub fn from_file_every(path: &Path, interval: Duration) -> Result<Self, String> {
        let token = read(path)?;
        Ok(Self {
            file: Some(path.to_owned()),
            state: Mutex::new(State {
                token: Arc::new(token),
                next_check: Instant::now() + interval,
            }),
            interval,
        })
    }

    /// The token to check a request against now.
    pub fn current(&self) -> Arc<String> {
        let mut s = self.state.lock().expect("token state");
        let Some(path) = &self.file else {
            return Arc::clone(&s.token);
        };
        let now = Instant::now();
        if now >= s.next_check {
            s.next_check = now + self.interval;
            match read(path) {
                Ok(t) if t != *s.token => {
                    tracing::info!(file = %path.display(), "token file changed: the new token is in use");
                    s.token = Arc::new(t);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "token file unusable; the previous token stays in use");
                }
            }
        }
        Arc::clone(&s.token)
    }
}

/// `--metrics-token-file`: `GET /metrics` needs `Authorization: Bearer`
/// with the token, compared as the RPC endpoint compares its own.
impl metrics::http::ScrapeAccess for Token {
    fn allows(&self, authorization: Option<&[u8]>) -> bool {
        let Some(given) = authorization.and_then(|a| a.strip_prefix(b"Bearer ")) else {
            return false;
        };
        super::http::token_matches(given.trim_ascii(), self.current().as_bytes())
    }
}

/// Reads a token file; a token shorter than [`MIN_LEN`] is refused.
pub fn read(path: &Path) -> Result<String, String> {
    let t = std::fs::read_to_string(path)
        .map_err(|e| format!("read token file {}: {e}", path.display()))?;
    let t = t.trim().to_owned();
    if t.len() < MIN_LEN {
        return Err(format!(
            "token in {} is shorter than {MIN_LEN} characters",
            path.display()
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_switches_the_token_and_a_bad_one_keeps_the_old() {
        let dir = std::env::temp_dir().join(format!("rc-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "first-token-0123456789\n").unwrap();
        let t = Token::from_file_every(&f, Duration::ZERO).unwrap();
        assert_eq!(*t.current(), "first-token-0123456789");
        std::fs::write(&f, "second-token-0123456789").unwrap();
        assert_eq!(*t.current(), "second-token-0123456789");
        // Too short, then gone: the last good token stays.
        std::fs::write(&f, "short").unwrap();
        assert_eq!(*t.current(), "second-token-0123456789");
        std::fs::remove_file(&f).unwrap();
        assert_eq!(*t.current(), "second-token-0123456789");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            Token::from_file(&f).is_err(),
            "a start needs a usable token"
        );
    }
}
