//! Helpers shared by the target's loopback tests (`durability`,
//! `loopback`, `revocation`): each starts a target in a runtime of its own,
//! drives it with `nvmf_host::host` and shuts it down at the end.

use std::time::Duration;

use nvmf::cqe::Status;
use nvmf_host::host::HostError;
use nvmf_tgt::Target;
use tokio::runtime::Runtime;

/// A runtime for one test's target: two workers, I/O and time drivers.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Shuts `target` down on `rt`; failing to within `bound` fails the test.
pub fn shutdown(rt: &Runtime, target: &Target, bound: Duration) {
    let t = target.clone();
    rt.block_on(async move {
        tokio::time::timeout(bound, t.shutdown())
            .await
            .expect("shutdown in time")
    });
}

/// The NVMe status of a command the target failed; any other error fails
/// the test.
pub fn status_of(e: HostError) -> Status {
    match e {
        HostError::Status { cqe, .. } => cqe.status,
        other => panic!("expected a status, got {other}"),
    }
}

/// Starts a listener of `nqn` on an ephemeral 127.0.0.1 port; its address.
#[allow(dead_code)] // each test binary compiles this module; not all use this
pub fn listen_loopback(rt: &Runtime, target: &Target, nqn: &str) -> std::net::SocketAddr {
    rt.block_on(target.add_listener(nqn, "127.0.0.1:0".parse().unwrap(), None, None))
        .unwrap()
}
