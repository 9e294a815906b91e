//! The secure channel of NVMe/TCP (TP 8011): TLS 1.3 with a pre-shared key,
//! begun by the host right after the TCP connection is made, before ICReq.
//!
//! The PSK is chosen by the identity the host offers (`NVMe0R01 <hostnqn>
//! <subnqn>`, [`PskIdentity`]): the subsystem `<subnqn>` must listen here
//! and list `<hostnqn>` with a PSK (`nvmf_subsystem_add_host --psk`), from
//! which the TLS PSK is derived ([`TlsPsk::tls_psk`]). The identity the
//! handshake proved is kept with the queue pair: its Connect must name the
//! same host and subsystem ([`crate::ctrlr`]).
//!
//! OpenSSL does the handshake and the record layer; rustls, the RPC's TLS
//! library, has no external PSKs. OpenSSL's PSK server callback serves
//! TLS 1.3 with SHA-256 cipher suites only, so PSKs with hash 02
//! (SHA-384) are refused when a host is added. No session tickets are
//! sent: the Linux host hands the socket to kernel TLS after the
//! handshake, and a post-handshake record ends its connection.

use std::sync::{Arc, Weak};
use std::time::Duration;

use nvmf::keys::Hash;
use nvmf::tls::PskIdentity;
use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{Ssl, SslContext, SslMethod, SslRef, SslVersion};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use crate::state::TargetState;

/// TLS 1.3 cipher suites for PSKs with hash 01 (SHA-256).
const CIPHER_SUITES: &str = "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256";

/// Why a handshake failed, kept for the log line (the host learns only
/// that the handshake failed).
#[derive(Clone, Debug)]
enum Refusal {
    Identity(String),
    Unknown(String),
}

/// Accepts secure-channel connections for one listener.
pub(crate) struct TlsAcceptor {
    ctx: SslContext,
    identity: Index<Ssl, PskIdentity>,
    refusal: Index<Ssl, Refusal>,
}

impl TlsAcceptor {
    /// An acceptor for the listener bound at `listen` of `target`.
    pub(crate) fn new(
        target: Weak<TargetState>,
        listen: std::net::SocketAddr,
    ) -> Result<Self, ErrorStack> {
        let identity = Ssl::new_ex_index::<PskIdentity>()?;
        let refusal = Ssl::new_ex_index::<Refusal>()?;
        let mut b = SslContext::builder(SslMethod::tls_server())?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
        b.set_max_proto_version(Some(SslVersion::TLS1_3))?;
        b.set_ciphersuites(CIPHER_SUITES)?;
        b.set_num_tickets(0)?;
        b.set_psk_server_callback(move |ssl, offered, out| {
            let found = offered
                .ok_or_else(|| Refusal::Identity("no PSK identity".into()))
                .and_then(|raw| {
                    PskIdentity::parse(raw).map_err(|e| Refusal::Identity(e.to_string()))
                })
                .and_then(|id| {
                    let target = target
                        .upgrade()
                        .ok_or_else(|| Refusal::Unknown("target shut down".into()))?;
                    let psk = psk_for(&target, listen, &id)?;
                    Ok((id, psk))
                });
            match found {
                Ok((id, psk)) if psk.len() <= out.len() => {
                    out[..psk.len()].copy_from_slice(&psk);
                    ssl.set_ex_data(identity, id);
                    Ok(psk.len())
                }
                Ok(_) => Ok(0),
                Err(why) => {
                    ssl.set_ex_data(refusal, why);
                    // 0: no PSK for this identity, the handshake fails.
                    Ok(0)
                }
            }
        });
        Ok(Self {
            ctx: b.build(),
            identity,
            refusal,
        })
    }

    /// Runs the handshake on `stream` (within `timeout`); returns the
    /// encrypted stream and the identity it proved.
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
        timeout: Duration,
    ) -> Result<(SslStream<TcpStream>, Arc<PskIdentity>), String> {
        let ssl = Ssl::new(&self.ctx).map_err(|e| format!("TLS session: {e}"))?;
        let mut s = SslStream::new(ssl, stream).map_err(|e| format!("TLS session: {e}"))?;
        let done = tokio::time::timeout(timeout, std::pin::Pin::new(&mut s).accept()).await;
        let refusal = |ssl: &SslRef| ssl.ex_data(self.refusal).cloned();
        match done {
            Err(_) => Err(format!("TLS handshake not done within {timeout:?}")),
            Ok(Err(e)) => Err(match refusal(s.ssl()) {
                Some(Refusal::Identity(why)) => format!("TLS handshake: bad PSK identity: {why}"),
                Some(Refusal::Unknown(why)) => format!("TLS handshake: {why}"),
                None => format!("TLS handshake: {e}"),
            }),
            Ok(Ok(())) => match s.ssl().ex_data(self.identity).cloned() {
                Some(id) => Ok((s, Arc::new(id))),
                None => Err("TLS handshake completed without a PSK".into()),
            },
        }
    }
}

/// The TLS PSK for `id`: the subsystem must listen at `listen` and allow
/// the host with a PSK of the identity's hash.
fn psk_for(
    target: &TargetState,
    listen: std::net::SocketAddr,
    id: &PskIdentity,
) -> Result<zeroize::Zeroizing<Vec<u8>>, Refusal> {
    let unknown = || {
        Refusal::Unknown(format!(
            "no PSK for host {} in subsystem {} at this listener",
            id.hostnqn, id.subnqn
        ))
    };
    let sub = target
        .subsystem(&id.subnqn)
        .filter(|s| s.listens_on(listen))
        .ok_or_else(unknown)?;
    if !sub.host_allowed(&id.hostnqn) {
        return Err(unknown());
    }
    let keys = sub.host_keys(&id.hostnqn);
    let named = keys.psk.ok_or_else(unknown)?;
    if named.psk.hash != id.hash || id.hash != Hash::Sha256 {
        return Err(Refusal::Identity(format!(
            "hash {:02} does not match the host's PSK",
            id.hash.id()
        )));
    }
    Ok(named.psk.tls_psk(id))
}
