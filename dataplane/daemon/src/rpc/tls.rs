//! The TLS side of the TCP JSON-RPC endpoint: a server certificate that
//! follows its files.
//!
//! Under the operator the certificate and key come from a Secret volume,
//! which the operator renews before expiry; the kubelet then swaps both
//! files at once (a `..data` symlink flip). Serving the pair read at start
//! until a restart would let the certificate expire under a running
//! daemon, so [`ServerTls::accept`] looks at the files again before a
//! handshake, at most once per [`CHECK_INTERVAL`], and switches when their
//! content changed and the new pair is usable. A replacement that is not
//! (unreadable, not PEM, key not matching the certificate, already
//! expired) is refused with a warning and the previous pair keeps serving:
//! a half-written or wrong Secret must not take the endpoint down.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use x509_parser::time::ASN1Time;

/// How often, at most, the files are read again (only when a connection
/// arrives): the kubelet takes up to a minute to update a Secret volume,
/// so a few seconds more do not matter, and a flood of connections does
/// not turn into a flood of file reads.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(3);

/// The TLS acceptor of the TCP endpoint, with the reloading certificate.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    cert: Arc<ReloadingCert>,
}

impl ServerTls {
    /// Loads the PEM certificate chain and private key (errors say which
    /// file is wrong and why) into rustls with the ring provider, TLS 1.2
    /// and 1.3, HTTP/1.1 by ALPN.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let files = CertFiles {
            cert: cert.to_owned(),
            key: key.to_owned(),
        };
        let contents = files.read()?;
        let pair = Pair::parse(&files, &contents)?;
        if pair.expired {
            // Still started: the operator can only rotate a certificate
            // of a daemon that runs.
            tracing::warn!(cert = %cert.display(), not_after = %pair.not_after, "the TLS certificate has expired; clients will refuse it until it is replaced");
        }
        tracing::info!(cert = %cert.display(), serial = %pair.serial, not_after = %pair.not_after, "TLS certificate loaded");
        let resolver = Arc::new(ReloadingCert {
            current: RwLock::new(Arc::new(pair.key)),
            check: tokio::sync::Mutex::new(Check {
                next: Instant::now() + CHECK_INTERVAL,
                seen: Ok(contents.fingerprint()),
            }),
            files,
        });
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS protocol versions: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            cert: resolver,
        })
    }

    /// The TLS handshake with the current pair, after switching to new
    /// files if they changed (checked at most once per [`CHECK_INTERVAL`]).
    pub async fn accept(&self, stream: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        self.cert.refresh_if_due().await;
        self.acceptor.accept(stream).await
    }
}

/// The certificate and key files.
#[derive(Clone)]
struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
}

/// What the files held when read.
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// A digest of both files (keeping the key's bytes around only to see
/// whether they changed would be one more copy of it in memory).
type Fingerprint = [u8; 32];

impl CertFiles {
    fn read(&self) -> Result<Contents, String> {
        let read = |p: &Path, what: &str| {
            std::fs::read(p).map_err(|e| format!("read TLS {what} {}: {e}", p.display()))
        };
        Ok(Contents {
            cert: read(&self.cert, "certificate")?,
            key: read(&self.key, "private key")?,
        })
    }
}

impl Contents {
    fn fingerprint(&self) -> Fingerprint {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [&self.cert, &self.key] {
            // Length-prefixed, so moving bytes from one file to the other
            // is a change too.
            ctx.update(&(part.len() as u64).to_le_bytes());
            ctx.update(part);
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        out
    }
}

/// A parsed, consistent pair and what the logs say about it.
struct Pair {
    key: CertifiedKey,
    serial: String,
    not_after: ASN1Time,
    expired: bool,
}

impl Pair {
    /// Parses both files; errors name the file and the reason, never the
    /// key's content.
    fn parse(files: &CertFiles, c: &Contents) -> Result<Self, String> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_slice_iter(&c.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("read TLS certificates from {}: {e}", files.cert.display()))?;
        let Some(leaf) = chain.first() else {
            return Err(format!("{} holds no PEM certificate", files.cert.display()));
        };
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| format!("parse the TLS certificate in {}: {e}", files.cert.display()))?;
        let validity = parsed.validity();
        let (serial, not_after) = (parsed.raw_serial_as_string(), validity.not_after);
        let expired = ASN1Time::now() > not_after;
        let key = PrivateKeyDer::from_pem_slice(&c.key)
            .map_err(|e| format!("read TLS private key from {}: {e}", files.key.display()))?;
        let provider = rustls::crypto::ring::default_provider();
        let key = CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
            let e = match e {
                rustls::Error::InconsistentKeys(_) => {
                    "the private key does not match the certificate".to_owned()
                }
                e => e.to_string(),
            };
            format!(
                "TLS certificate {} and key {}: {e}",
                files.cert.display(),
                files.key.display()
            )
        })?;
        Ok(Self {
            key,
            serial,
            not_after,
            expired,
        })
    }
}

/// The resolver rustls asks for the certificate of each handshake.
struct ReloadingCert {
    files: CertFiles,
    current: RwLock<Arc<CertifiedKey>>,
    check: tokio::sync::Mutex<Check>,
}

/// When to look at the files next, and what they held when last looked
/// at (served or refused: a refused replacement is warned about once, not
/// at every check).
struct Check {
    next: Instant,
    seen: Result<Fingerprint, String>,
}

impl ReloadingCert {
    async fn refresh_if_due(&self) {
        // Another connection is checking: this one uses the current pair.
        let Ok(mut check) = self.check.try_lock() else {
            return;
        };
        if Instant::now() < check.next {
            return;
        }
        let files = self.files.clone();
        let read = tokio::task::spawn_blocking(move || files.read()).await;
        check.next = Instant::now() + CHECK_INTERVAL;
        let contents = match read {
            Ok(r) => r,
            Err(e) => Err(format!("read the TLS files: {e}")),
        };
        let seen = contents
            .as_ref()
            .map(Contents::fingerprint)
            .map_err(Clone::clone);
        if seen == check.seen {
            return;
        }
        check.seen = seen;
        let pair = contents.and_then(|c| {
            let p = Pair::parse(&self.files, &c)?;
            match p.expired {
                true => Err(format!(
                    "the new certificate in {} expired at {}",
                    self.files.cert.display(),
                    p.not_after
                )),
                false => Ok(p),
            }
        });
        match pair {
            Ok(p) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(p.key);
                tracing::info!(cert = %self.files.cert.display(), serial = %p.serial, not_after = %p.not_after, "TLS certificate replaced: new connections get the new one");
            }
            Err(reason) => {
                tracing::warn!(%reason, "TLS certificate files changed but cannot be used: keeping the previous certificate");
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(|e| e.into_inner()),
        ))
    }
}

// rustls wants Debug; the paths are all there is to show (the pair holds
// the private key).
impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.files.cert)
            .field("key", &self.files.key)
            .finish_non_exhaustive()
    }
}
