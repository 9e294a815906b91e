//! The JSON-RPC accept loop backs off after a failed accept: out of file
//! descriptors (EMFILE), a retry at once fails again at once and spins a
//! CPU. Alone in its test binary: it lowers the process's descriptor
//! limit.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rackcache_dataplane::app::App;
use rackcache_dataplane::rpc::http::{serve_tcp, TcpOptions};
use tokio::sync::watch;

/// Counts log lines that report a failed accept.
#[derive(Clone)]
struct Count(Arc<AtomicUsize>);

impl Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if String::from_utf8_lossy(buf).contains("accept failed") {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn nofile() -> libc::rlimit {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    r
}

fn set_nofile(r: &libc::rlimit) {
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, r) }, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn accept_failures_back_off() {
    let failures = Arc::new(AtomicUsize::new(0));
    let w = Count(failures.clone());
    let _log = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .finish(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // A connection waits in the backlog; then no descriptor is left for
    // accepting it.
    let _client = std::net::TcpStream::connect(addr).unwrap();
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let before = nofile();
    set_nofile(&libc::rlimit {
        rlim_cur: open.saturating_sub(1),
        rlim_max: before.rlim_max,
    });
    let (stop, stopped) = watch::channel(false);
    let started = std::time::Instant::now();
    let server = tokio::spawn(serve_tcp(
        listener,
        TcpOptions::new("token".into(), None),
        Arc::new(App::new()),
        stopped,
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.send_replace(true);
    server.await.unwrap();
    let elapsed = started.elapsed();
    set_nofile(&before);
    let n = failures.load(Ordering::Relaxed);
    // At most one failure per backoff (50 ms) over the time the loop really
    // ran (a loaded machine sleeps longer than asked): without a backoff,
    // thousands.
    let bound = elapsed.as_millis() as usize / 50 + 2;
    assert!(n >= 1, "the accept failed (descriptor limit)");
    assert!(
        n <= bound,
        "{n} failed accepts in {elapsed:?}: no backoff (at most {bound})"
    );
}
