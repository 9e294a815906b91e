//! `rackcache-dataplane`: the cache server process.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, ValueEnum};
use rackcache_dataplane::app::App;
use rackcache_dataplane::{config, rpc};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The rackcache cache server: block devices, (soon) the adaptive cache, and
/// the NVMe/TCP target, driven by SPDK-compatible JSON-RPC.
#[derive(Parser)]
#[command(version)]
#[command(group(clap::ArgGroup::new("caller_auth").args(["rpc_token_file", "rpc_token_audience"])))]
struct Args {
    /// Unix socket for JSON-RPC (SPDK's default path).
    #[arg(short = 'r', long, default_value = "/var/tmp/spdk.sock")]
    rpc_socket: PathBuf,
    /// A configuration saved by `save_config` to apply at start (unless
    /// the --config-persist file exists).
    #[arg(short = 'c', long)]
    config: Option<PathBuf>,
    /// Keep the configuration in this file: loaded at start when it exists,
    /// rewritten atomically (mode 0600) after every successful change.
    #[arg(long)]
    config_persist: Option<PathBuf>,
    /// Also serve JSON-RPC over HTTPS on this TCP address (for the
    /// operator); requires --rpc-token-file or --rpc-token-audience, and
    /// either --rpc-tls-cert and --rpc-tls-key, or --rpc-insecure.
    #[arg(long, requires = "caller_auth")]
    rpc_listen: Option<std::net::SocketAddr>,
    /// File holding the bearer token that TCP JSON-RPC callers must present;
    /// read again when it changes (at most every 3 s), so a rotated token
    /// takes over without a restart.
    #[arg(long)]
    rpc_token_file: Option<PathBuf>,
    /// Instead of --rpc-token-file: callers present Kubernetes
    /// ServiceAccount tokens issued for this audience, checked with a
    /// TokenReview (the operator gives each server an audience of its own).
    #[arg(long, requires = "rpc_allowed_caller")]
    rpc_token_audience: Option<String>,
    /// The one caller --rpc-token-audience lets in
    /// (system:serviceaccount:NAMESPACE:NAME).
    #[arg(long, requires = "rpc_token_audience")]
    rpc_allowed_caller: Option<String>,
    /// The API server that reviews tokens (default: the one the kubelet
    /// names, https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
    #[arg(long, requires = "rpc_token_audience")]
    kube_api: Option<String>,
    /// CA bundle of the API server.
    #[arg(
        long,
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )]
    kube_ca_file: PathBuf,
    /// This server's own ServiceAccount token, allowed to create
    /// TokenReviews (read again when the kubelet refreshes it).
    #[arg(
        long,
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    kube_token_file: PathBuf,
    /// PEM certificate chain of the TCP JSON-RPC endpoint.
    #[arg(long, requires_all = ["rpc_listen", "rpc_tls_key"])]
    rpc_tls_cert: Option<PathBuf>,
    /// PEM private key of the TCP JSON-RPC endpoint.
    #[arg(long, requires_all = ["rpc_listen", "rpc_tls_cert"])]
    rpc_tls_key: Option<PathBuf>,
    /// Serve --rpc-listen as plain HTTP: the token, cephx keys and saved
    /// configurations then cross the network in clear. For tests only.
    #[arg(long, requires = "rpc_listen", conflicts_with_all = ["rpc_tls_cert", "rpc_tls_key"])]
    rpc_insecure: bool,
    /// The cephx keyring of every Ceph cluster registered without a key of
    /// its own (no `key`, `keyring` or `key_file`): the operator mounts its
    /// Secret here, so the key never enters a saved configuration.
    #[arg(long)]
    ceph_keyring: Option<PathBuf>,
    /// Serve Prometheus metrics (GET /metrics) and the Kubernetes probes
    /// (GET /healthz, GET /readyz) on this TCP address.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// File holding the bearer token `GET /metrics` needs (the metrics name
    /// volumes and subsystems); the probes stay open. Read again when it
    /// changes, as --rpc-token-file is.
    #[arg(long, requires = "metrics_listen")]
    metrics_token_file: Option<PathBuf>,
    /// How the runtime's threads wait for I/O: `off` sleeps whenever
    /// nothing is ready (no CPU when idle), except for up to 50us while a
    /// host owes write data the target asked for; `on` never sleeps (a busy core
    /// per runtime thread, as SPDK's reactors: the lowest latency); a
    /// window such as `50us` spins that long after the last NVMe/TCP
    /// activity, then sleeps.
    #[arg(long, default_value = "off")]
    busy_poll: nvmf_tgt::PollMode,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// The runtime for the CPUs this process may use. Pinned to one core (the
/// usual way to run the target), a current-thread runtime serves every
/// connection from the main thread without the work-stealing scheduler's
/// cross-thread wake-ups; measured on the NVMe/TCP bench (loadgen's
/// benches/nvmf_tcp.rs). With more cores, one worker per core.
/// `RACKCACHE_RUNTIME=current-thread|multi-thread` overrides the choice.
fn runtime_builder() -> (tokio::runtime::Builder, usize) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let current_thread = match std::env::var("RACKCACHE_RUNTIME").as_deref() {
        Ok("current-thread") => true,
        Ok("multi-thread") => false,
        _ => cpus == 1,
    };
    if current_thread {
        (tokio::runtime::Builder::new_current_thread(), 1)
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(cpus);
        (b, cpus)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("RACKCACHE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    let (mut builder, threads) = runtime_builder();
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rackcache-dataplane: start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // One spinner per runtime thread (see nvmf_tgt::poller); the runtime
    // drops them when it shuts down.
    if args.busy_poll != nvmf_tgt::PollMode::Interrupt {
        tracing::info!(mode = %args.busy_poll, threads, "busy polling");
    }
    let mut app = App::new();
    app.ceph_keyring = args.ceph_keyring.clone();
    let app = Arc::new(app);
    for _ in 0..threads {
        rt.spawn(app.poller.clone().spin(args.busy_poll));
    }
    match rt.block_on(run(args, app)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "rackcache-dataplane failed");
            ExitCode::FAILURE
        }
    }
}

/// The TCP endpoint's options, or why the flags do not allow one.
fn tcp_options(args: &Args) -> Result<Option<rpc::http::TcpOptions>, String> {
    if args.rpc_listen.is_none() {
        return Ok(None);
    }
    let auth = caller_auth(args)?;
    let tls = match (&args.rpc_tls_cert, &args.rpc_tls_key) {
        (Some(cert), Some(key)) => Some(rpc::tls::ServerTls::load(cert, key)?),
        _ if args.rpc_insecure => None,
        _ => {
            return Err(
                "--rpc-listen carries the RPC token, cephx keys and saved configurations: \
                 give --rpc-tls-cert and --rpc-tls-key, or --rpc-insecure to serve plain HTTP \
                 (test set-ups only)"
                    .to_owned(),
            )
        }
    };
    Ok(Some(rpc::http::TcpOptions::with_auth(auth, tls)))
}

/// How the TCP endpoint checks its callers (clap has made sure one way is
/// given).
fn caller_auth(args: &Args) -> Result<rpc::auth::CallerAuth, String> {
    use rpc::review::{in_cluster_url, ApiAccess, Expectation, Reviewer};
    if let Some(f) = &args.rpc_token_file {
        return Ok(rpc::auth::CallerAuth::Token(rpc::token::Token::from_file(
            f,
        )?));
    }
    let (Some(audience), Some(caller)) = (&args.rpc_token_audience, &args.rpc_allowed_caller)
    else {
        return Err("--rpc-listen needs --rpc-token-file or --rpc-token-audience".to_owned());
    };
    let url = args
        .kube_api
        .clone()
        .or_else(in_cluster_url)
        .ok_or("--rpc-token-audience needs --kube-api or KUBERNETES_SERVICE_HOST and _PORT")?;
    let api = ApiAccess {
        url,
        ca_file: args.kube_ca_file.clone(),
        token_file: args.kube_token_file.clone(),
    };
    let want = Expectation {
        audience: audience.clone(),
        caller: caller.clone(),
    };
    tracing::info!(api = %api.url, audience = %want.audience, caller = %want.caller, "json-rpc callers are checked with token reviews");
    Ok(rpc::auth::CallerAuth::Review(Box::new(Reviewer::new(
        &api, want,
    )?)))
}

/// Applies the persisted configuration if it exists, else `--config`.
/// Every call is tried and every failure reported; the daemon then serves
/// what succeeded and keeps the failed calls (`rackcache_get_config_errors`),
/// in the persisted file too, so a later start or
/// `rackcache_retry_config_errors` tries them again: one bad entry (a
/// damaged cache device, an image deleted while the server was away) must
/// not keep every other volume of the server offline.
async fn load_config(args: &Args, app: &App) -> Result<(), String> {
    let path = match &args.config_persist {
        Some(p) if p.exists() => p,
        _ => match &args.config {
            Some(p) => p,
            None => return Ok(()),
        },
    };
    let loaded = config::load(path, app).await?;
    if loaded.failed.is_empty() {
        tracing::info!(config = %path.display(), calls = loaded.applied, "configuration loaded");
        return Ok(());
    }
    let lines: Vec<String> = loaded.failed.iter().map(|f| f.line()).collect();
    tracing::error!(config = %path.display(), applied = loaded.applied,
        failed = loaded.failed.len(), calls = %lines.join("; "),
        "configuration loaded in part: serving the rest, the failed calls are kept (rackcache_get_config_errors)");
    app.state.lock().await.config_errors.add(loaded.failed);
    Ok(())
}

async fn run(args: Args, app: Arc<App>) -> Result<(), String> {
    let tcp = tcp_options(&args)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    // The metrics port carries the Kubernetes probes: it listens first, so
    // the liveness probe is answered while a long configuration (cache
    // devices to load, Ceph clusters to reach) is applied, and the
    // readiness probe says why the daemon is not ready yet.
    let readiness = metrics::http::Readiness::new("applying the start-up configuration");
    let mut servers = Vec::new();
    if let Some(addr) = args.metrics_listen {
        let access =
            match &args.metrics_token_file {
                Some(f) => Some(Arc::new(rpc::token::Token::from_file(f)?)
                    as Arc<dyn metrics::http::ScrapeAccess>),
                None => None,
            };
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("listen for metrics on {addr}: {e}"))?;
        tracing::info!(addr = %l.local_addr().map_err(|e| e.to_string())?, "metrics listening");
        servers.push(tokio::spawn(metrics::http::serve(
            l,
            Arc::clone(&app.metrics),
            Arc::clone(&readiness),
            access,
            stop_rx.clone(),
        )));
    }
    load_config(&args, &app).await?;
    readiness.not_ready("opening the RPC listeners");
    if let Some(p) = &args.config_persist {
        let _ = app.persist.set(config::Persist::new(p.clone()));
        // Written now too, so a --config seed or a file from an older
        // version is in the current form before anything changes.
        rackcache_dataplane::methods::saved_config::try_persist(&app).await?;
        tracing::info!(file = %p.display(), "configuration persisted after every change");
    }
    let listener = rpc::server::bind_unix(&args.rpc_socket)
        .await
        .map_err(|e| format!("listen on {}: {e}", args.rpc_socket.display()))?;
    tracing::info!(socket = %args.rpc_socket.display(), "json-rpc listening");

    servers.push(tokio::spawn(rpc::server::serve_unix(
        listener,
        args.rpc_socket.clone(),
        Arc::clone(&app),
        stop_rx.clone(),
    )));
    if let (Some(addr), Some(options)) = (args.rpc_listen, tcp) {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("listen for json-rpc on {addr}: {e}"))?;
        let local = l.local_addr().map_err(|e| e.to_string())?;
        if options.tls.is_some() {
            tracing::info!(addr = %local, "json-rpc over https listening (bearer token required)");
        } else {
            tracing::warn!(addr = %local, "json-rpc over PLAIN HTTP listening (--rpc-insecure): the token and keys cross the network in clear");
        }
        servers.push(tokio::spawn(rpc::http::serve_tcp(
            l,
            options,
            Arc::clone(&app),
            stop_rx.clone(),
        )));
    }
    // Cached bdevs' statistics onto /metrics (see cache_metrics).
    servers.push(tokio::spawn(
        rackcache_dataplane::cache_metrics::refresh::run(Arc::clone(&app), stop_rx.clone()),
    ));
    readiness.ready();
    tracing::info!("ready");
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT handler: {e}"))?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    readiness.not_ready("shutting down");
    let _ = stop_tx.send(true);
    for s in servers {
        let _ = s.await;
    }
    // Stop accepting NVMe/TCP connections, let the queues finish what they
    // have in flight, flush the namespaces' bdevs.
    let target = app.state.lock().await.nvmf.target.clone();
    if let Some(t) = target {
        t.shutdown().await;
        tracing::info!("NVMe-oF target stopped");
    }
    // Cached bdevs finish what is in flight and make their metadata
    // durable (dirty data stays cached: the next start loads it).
    rackcache_dataplane::cached_volumes::stop_all(&app).await;
    // Make every completed write durable before exiting.
    let bdevs: Vec<_> = app
        .state
        .lock()
        .await
        .bdevs
        .values()
        .map(|(_, b)| Arc::clone(b))
        .collect();
    for b in bdevs {
        if let Err(e) = b.bdev.flush().await {
            tracing::warn!(bdev = %b.bdev.info().name, error = %e, "flush at shutdown failed");
        }
    }
    release_all(&app).await;
    tracing::info!("stopped");
    Ok(())
}

/// Drops the target and every bdev and Ceph connection, and waits until
/// librbd has closed each image: an image left open at exit keeps its watch
/// and exclusive lock on the OSDs until they time out (its next user, this
/// daemon restarted or another server, stalls 30 seconds), and librbd's
/// threads would race the process's exit.
async fn release_all(app: &App) {
    app.lease.detach();
    let mut state = app.state.lock().await;
    state.nvmf = Default::default();
    state.caches.clear();
    let bdevs = std::mem::take(&mut state.bdevs);
    let clusters = std::mem::take(&mut state.clusters);
    drop(state);
    // Newest first: a bdev built on another goes before it.
    let mut bdevs: Vec<_> = bdevs.into_values().collect();
    bdevs.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    for (_, reg) in bdevs {
        drop(reg);
    }
    drop(clusters);
    let timeout = std::time::Duration::from_secs(60);
    let open = tokio::task::spawn_blocking(move || bdev::rbd::wait_until_all_closed(timeout))
        .await
        .unwrap_or(usize::MAX);
    if open > 0 {
        tracing::warn!(
            open,
            "rbd images still open at exit; their locks expire on the OSDs"
        );
    }
}
