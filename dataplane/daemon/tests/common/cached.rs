//! Helpers of the cached-bdev tests (`adacache*.rs`): a cached bdev
//! exported over NVMe/TCP, data patterns, bdev lists, /metrics samples,
//! saved configurations and the rackcache plugin of SPDK's command line.

use std::path::Path;
use std::time::{Duration, Instant};

use nvmf_host::host::HostController;
use serde_json::{json, Value};

use super::{host_params, rpc, unix_rpc};

pub const NQN: &str = "nqn.2016-06.io.rackcache:cached";
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000d1";

/// Creates a malloc bdev `name` of `num_blocks` blocks of `block_size`
/// bytes (a core or a cache device of these tests).
pub fn malloc(socket: &Path, name: &str, num_blocks: u64, block_size: usize) {
    rpc(
        socket,
        "bdev_malloc_create",
        json!({"name": name, "num_blocks": num_blocks, "block_size": block_size}),
    );
}

pub fn connect(port: u16) -> HostController {
    HostController::connect(&host_params(port, NQN, HOST, 0xd1), 1).expect("the host connects")
}

/// Exports `bdev` as namespace 1 of NQN on a TCP listener at `port`.
pub fn export(socket: &Path, bdev: &str, port: u16) {
    super::export(socket, NQN, bdev, port);
}

pub fn unexport(socket: &Path) {
    rpc(socket, "nvmf_delete_subsystem", json!({"nqn": NQN}));
}

/// A pattern no two (seed, block) pairs share.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i / 512) as u8 ^ seed.wrapping_mul(31) ^ (i as u8).rotate_left(3))
        .collect()
}

pub fn read(c: &mut HostController, lba: u64, bs: usize, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    c.io[0].read_blocks(1, lba, bs, &mut b).expect("read");
    b
}

pub fn write(c: &mut HostController, lba: u64, bs: usize, data: &[u8]) {
    c.io[0].write_blocks(1, lba, bs, data, 8192).expect("write");
}

pub fn bdev_names(socket: &Path) -> Vec<String> {
    rpc(socket, "bdev_get_bdevs", json!({}))
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The error of a call that must fail.
pub fn refused(socket: &Path, method: &str, params: Value) -> Value {
    unix_rpc(socket, method, params.clone()).expect_err(&format!("{method} {params} was accepted"))
}

/// The value of the series `name{labels}` in a /metrics text.
pub fn metric(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().expect("a number"))
}

pub fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Waits (bounded) until /metrics shows `want` for `name{labels}`: the
/// series are refreshed once a second.
pub fn wait_metric(port: u16, name: &str, labels: &str, want: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = scrape(port);
        if metric(&text, name, labels) == Some(want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{name}{{{labels}}} never became {want}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The params `save_config` records for cached bdev `name`.
pub fn saved_params(socket: &Path, name: &str) -> Value {
    let cfg = rpc(socket, "save_config", json!({}));
    cfg["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["subsystem"] == "bdev")
        .flat_map(|s| s["config"].as_array().unwrap())
        .find(|c| c["method"] == "bdev_adacache_create" && c["params"]["name"] == name)
        .map(|c| c["params"].clone())
        .unwrap_or_else(|| panic!("{name} not saved: {cfg}"))
}

/// The configuration's calls, in order, as (method, params).
pub fn config_calls(file: &Path) -> Vec<(String, Value)> {
    let v: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    v["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["config"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["method"].as_str().unwrap().to_owned(),
                c["params"].clone(),
            )
        })
        .collect()
}

/// `spdk-rpc` (SPDK's stock command line from the project's venv) with
/// rackcache's plugin (python/rackcache_rpc_plugin.py): its standard
/// output, or standard output and error when it fails.
pub fn plugin_cli(socket: &Path, args: &[&str]) -> Result<String, String> {
    let root = testkit::repo_root();
    let cli = root.join("bin/venv/bin/spdk-rpc");
    assert!(
        cli.exists(),
        "{} is missing: run `hack/deps.sh python` (or `make deps`)",
        cli.display()
    );
    let out = std::process::Command::new(cli)
        .arg("-s")
        .arg(socket)
        .env("PYTHONPATH", root.join("python"))
        .args(["--plugin", "rackcache_rpc_plugin"])
        .args(args)
        .output()
        .expect("run spdk-rpc");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The samples of the cached-volume families (`rackcache_cache_*`) of
/// the daemon's /metrics (on `port`) as prometheus-client's OpenMetrics
/// parser (from the project's venv) reads them: `type name labels value`
/// lines, labels sorted. Only those families: the page as a whole is
/// refused while the NVMe-oF target's `rackcache_nvmf_connections` gauge
/// and `rackcache_nvmf_connections_total` counter share a family name.
pub fn parsed_samples(port: u16) -> String {
    const PARSE: &str = r##"
import sys, urllib.request
from prometheus_client.openmetrics.parser import text_string_to_metric_families
body = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
def family(line):
    return line.split(" ")[2] if line.startswith("# ") else line
body = "".join(l + "\n" for l in body.splitlines()
               if l == "# EOF" or family(l).startswith("rackcache_cache_"))
for fam in text_string_to_metric_families(body):
    for s in fam.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{fam.type} {s.name} {labels} {s.value}")
"##;
    let out = std::process::Command::new(testkit::spdk_python())
        .args(["-c", PARSE, &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .expect("run the parser");
    assert!(
        out.status.success(),
        "prometheus-client refused /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the parsed sample `prefix` (type, name and labels).
pub fn parsed(samples: &str, prefix: &str) -> Option<f64> {
    samples
        .lines()
        .find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
}
