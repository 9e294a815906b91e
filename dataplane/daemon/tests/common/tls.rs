//! Certificates made at test time (rcgen) and a blocking HTTPS client
//! (rustls) for the daemon's TLS JSON-RPC endpoint.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// A CA and a server certificate it signed for 127.0.0.1 and localhost.
pub struct Pki {
    /// The CA certificate.
    pub ca: CertificateDer<'static>,
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The server certificate file (PEM).
    pub cert: PathBuf,
    /// The server key file (PEM).
    pub key: PathBuf,
}

/// Writes `{name}.crt` and `{name}.key` into `dir`.
pub fn make_pki(dir: &Path, name: &str) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    let (cert_file, key_file) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    Pki {
        ca: ca.der().clone(),
        ca_pem: ca.pem(),
        cert: cert_file,
        key: key_file,
    }
}

fn client_config(ca: &CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Connects to 127.0.0.1:`port`, waiting up to 30 s for the daemon to
/// listen.
pub fn connect(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                return s;
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("connect to 127.0.0.1:{port}: {e}"),
        }
    }
}

/// A TLS session to the daemon verified against `ca`; `Err` when the
/// handshake fails (e.g. the server's certificate is not from `ca`).
pub fn tls_connect(
    port: u16,
    ca: &CertificateDer<'static>,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(client_config(ca), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, connect(port));
    while s.conn.is_handshaking() {
        s.conn
            .complete_io(&mut s.sock)
            .map_err(|e| format!("TLS handshake: {e}"))?;
    }
    Ok(s)
}

/// Splits a raw HTTP/1.1 response into (status code, body).
pub fn parse_response(resp: &[u8]) -> (u16, String) {
    let resp = String::from_utf8_lossy(resp);
    let code = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// Reads until the server closes; a TLS session closed without
/// close_notify still returns what arrived.
pub fn read_all(s: &mut impl Read) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return out,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("read the answer: {e}"),
        }
    }
}

/// One HTTPS request; returns (status code, body).
pub fn https(port: u16, ca: &CertificateDer<'static>, request: &[u8]) -> (u16, String) {
    let mut s = tls_connect(port, ca).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(request).unwrap();
    s.flush().unwrap();
    parse_response(&read_all(&mut s))
}

/// A JSON-RPC POST with an optional bearer token.
pub fn rpc_request(token: Option<&[u8]>, body: &str) -> Vec<u8> {
    let mut r = b"POST / HTTP/1.1\r\nHost: x\r\n".to_vec();
    if let Some(t) = token {
        r.extend_from_slice(b"Authorization: Bearer ");
        r.extend_from_slice(t);
        r.extend_from_slice(b"\r\n");
    }
    r.extend_from_slice(
        format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    r
}

/// A CA that issues server certificates for 127.0.0.1 with a chosen serial
/// and expiry (what the operator does when it rotates a certificate).
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM, and the certificate's DER (what a
/// client receives).
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    /// The CA certificate clients trust.
    pub fn der(&self) -> &CertificateDer<'static> {
        self.issuer.der()
    }

    /// A server certificate with `serial`, valid until `not_after`
    /// (year, month, day), with a new key.
    pub fn issue(&self, serial: u64, not_after: (i32, u8, u8)) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        params.serial_number = Some(serial.into());
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }
}

/// The certificate the server at 127.0.0.1:`port` presents to a client
/// trusting `ca` (`Err` when the handshake fails).
pub fn peer_certificate(
    port: u16,
    ca: &CertificateDer<'static>,
) -> Result<CertificateDer<'static>, String> {
    let s = tls_connect(port, ca)?;
    let chain = s
        .conn
        .peer_certificates()
        .ok_or("the server presented no certificate")?;
    Ok(chain[0].clone().into_owned())
}
