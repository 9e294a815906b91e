//! A listener's accept loop: every accepted socket becomes one queue pair
//! task, up to the listener's connection cap.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};

use crate::state::{until_true, TargetState};

/// Accepts connections on `sock` (bound at `bound`) until the listener is
/// stopped or the target shuts down.
pub(crate) async fn accept_loop(
    sock: TcpListener,
    bound: SocketAddr,
    state: Arc<TargetState>,
    mut stop: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
) {
    let mut shutdown = state.shutdown_signal();
    let max = state.opts().max_connections_per_listener;
    let open = Arc::new(Semaphore::new(max as usize));
    loop {
        tokio::select! {
            r = sock.accept() => match r {
                Ok((stream, peer)) => {
                    // Over the cap the connection is closed before any
                    // memory is set aside for it.
                    let Ok(slot) = open.clone().try_acquire_owned() else {
                        tracing::warn!(%bound, %peer, max, "connection refused: listener at max_connections_per_listener");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (rd, wr) = stream.into_split();
                    let serve = super::serve(
                        rd,
                        wr,
                        peer,
                        bound,
                        state.clone(),
                        drain.clone(),
                    );
                    tokio::spawn(async move {
                        serve.await;
                        drop(slot);
                    });
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
