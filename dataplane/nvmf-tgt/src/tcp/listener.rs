//! A listener's accept loop: every accepted socket becomes one queue pair
//! task, within the listener's caps ([`super::admission`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use super::admission::{Admission, ListenerSlots};
use super::serve::Arrival;
use super::tls::TlsAcceptor;
use crate::state::{until_true, TargetState};

/// Accepts connections on `sock` (bound at `bound`) until the listener is
/// stopped or the target shuts down.
pub(crate) async fn accept_loop(
    sock: TcpListener,
    bound: SocketAddr,
    state: Arc<TargetState>,
    mut stop: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
    tls: Option<Arc<TlsAcceptor>>,
) {
    let mut shutdown = state.shutdown_signal();
    let slots = ListenerSlots::new(state.opts());
    loop {
        tokio::select! {
            r = sock.accept() => match r {
                Ok((stream, peer)) => {
                    // Over a cap the socket is closed before any memory is
                    // set aside for it.
                    let admission = match slots.admit(peer.ip()) {
                        Ok(a) => a,
                        Err(why) => {
                            if state.peer_log().allow(peer.ip()) {
                                tracing::warn!(%bound, %peer, "connection refused: {why}");
                            }
                            continue;
                        }
                    };
                    tune(&stream, state.opts().tcp_keepalive);
                    match &tls {
                        None => {
                            let (rd, wr) = stream.into_split();
                            let arrival = Arrival {
                                peer,
                                listen: bound,
                                admission,
                                secure: None,
                            };
                            tokio::spawn(super::serve(rd, wr, arrival, state.clone(), drain.clone()));
                        }
                        Some(tls) => {
                            tokio::spawn(serve_secure(
                                tls.clone(),
                                stream,
                                peer,
                                bound,
                                state.clone(),
                                drain.clone(),
                                admission,
                            ));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(%bound, "accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = until_true(&mut stop) => break,
            _ = until_true(&mut shutdown) => break,
        }
    }
    tracing::info!(%bound, "NVMe/TCP listener stopped");
}

/// A secure-channel connection: the TLS handshake (within the identify
/// timeout, holding only its place at the gate), then the queue pair over
/// the encrypted stream, bound to the identity the handshake proved.
async fn serve_secure(
    tls: Arc<TlsAcceptor>,
    stream: TcpStream,
    peer: SocketAddr,
    bound: SocketAddr,
    state: Arc<TargetState>,
    drain: mpsc::Sender<()>,
    admission: Admission,
) {
    match tls.accept(stream, state.opts().identify_timeout).await {
        Ok((stream, identity)) => {
            tracing::debug!(%bound, %peer, hostnqn = %identity.hostnqn, subnqn = %identity.subnqn, "TLS secure channel established");
            let (rd, wr) = tokio::io::split(stream);
            let arrival = Arrival {
                peer,
                listen: bound,
                admission,
                secure: Some(identity),
            };
            super::serve(rd, wr, arrival, state, drain).await;
        }
        Err(why) => {
            if state.peer_log().allow(peer.ip()) {
                tracing::warn!(%bound, %peer, "connection closed: {why}");
            }
        }
    }
}

/// No Nagle delay on PDUs; TCP keep-alive probes after `keepalive` without
/// traffic (then every third of it, three times) and the same bound on
/// unacknowledged data, so that a peer that vanished (a host with
/// keep-alive timeout 0 included) ends its queue pair.
fn tune(stream: &TcpStream, keepalive: Duration) {
    let sock = SockRef::from(stream);
    let probes = TcpKeepalive::new()
        .with_time(keepalive)
        .with_interval((keepalive / 3).max(Duration::from_secs(1)))
        .with_retries(3);
    let r = stream
        .set_nodelay(true)
        .and_then(|()| sock.set_tcp_keepalive(&probes))
        .and_then(|()| sock.set_tcp_user_timeout(Some(keepalive)));
    if let Err(e) = r {
        tracing::debug!("socket options: {e}");
    }
}
