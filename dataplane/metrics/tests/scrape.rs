//! /metrics scraped over real HTTP and parsed by the official Prometheus
//! Python client's OpenMetrics parser (prometheus-client from the project's
//! venv), the format the endpoint declares in its Content-Type.

use std::process::Command;
use std::sync::Arc;

use metrics::{http, Registry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const PARSE: &str = r#"
import sys, urllib.request
from prometheus_client.openmetrics.parser import text_string_to_metric_families
resp = urllib.request.urlopen(sys.argv[1], timeout=10)
assert resp.headers["Content-Type"].startswith("application/openmetrics-text"), resp.headers["Content-Type"]
body = resp.read().decode()
for fam in text_string_to_metric_families(body):
    for s in fam.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{fam.type} {s.name} {labels} {s.value}")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_parser_reads_what_we_serve() {
    let registry = Registry::new();
    let reads = registry
        .counter(
            "rackcache_bdev_read_bytes_total",
            "Bytes read from the bdev.",
            &[("bdev", "Malloc0")],
        )
        .unwrap();
    reads.add(1 << 20);
    registry
        .gauge(
            "rackcache_nvmf_connections",
            "Open NVMe/TCP connections.",
            &[("subnqn", "nqn.2026-11.io.rackcache:v\"1")],
        )
        .unwrap()
        .set(3);
    let lat = registry
        .histogram(
            "rackcache_bdev_read_latency_seconds",
            "Read latency.",
            &[("bdev", "Malloc0")],
        )
        .unwrap();
    for ns in [800, 1_500, 3_000, 250_000] {
        lat.observe_ns(ns);
    }

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = watch::channel(false);
    let server = tokio::spawn(http::serve(
        listener,
        Arc::clone(&registry),
        http::Readiness::new("test"),
        None,
        stopped,
    ));

    let url = format!("http://{addr}/metrics");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(testkit::spdk_python())
            .args(["-c", PARSE, &url])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "parser failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples = String::from_utf8_lossy(&out.stdout);
    // The Python client strips the _total suffix from the family name only.
    for want in [
        "counter rackcache_bdev_read_bytes_total bdev=Malloc0 1048576",
        "gauge rackcache_nvmf_connections subnqn=nqn.2026-11.io.rackcache:v\"1 3",
        "histogram rackcache_bdev_read_latency_seconds_bucket bdev=Malloc0,le=0.000001 1",
        "histogram rackcache_bdev_read_latency_seconds_bucket bdev=Malloc0,le=0.000002 2",
        "histogram rackcache_bdev_read_latency_seconds_bucket bdev=Malloc0,le=0.000004 3",
        "histogram rackcache_bdev_read_latency_seconds_bucket bdev=Malloc0,le=+Inf 4",
        "histogram rackcache_bdev_read_latency_seconds_count bdev=Malloc0 4",
    ] {
        assert!(
            samples.lines().any(|l| l == want),
            "missing {want:?} in:\n{samples}"
        );
    }
    let sum_line = samples
        .lines()
        .find(|l| l.starts_with("histogram rackcache_bdev_read_latency_seconds_sum"))
        .expect("a _sum sample");
    let sum: f64 = sum_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((sum - 255.3e-6).abs() < 1e-9, "sum {sum}");

    // Anything but GET /metrics is refused.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    assert!(resp.starts_with("HTTP/1.1 405 "), "{resp}");

    stop.send(true).unwrap();
    server.await.unwrap();
}
