//! The load generator against a target that asks its host to authenticate
//! (DH-HMAC-CHAP): with the host's key files it runs; without, it is
//! refused at the first command.

use std::sync::Arc;
use std::time::Duration;

use bdev::malloc::MallocBdev;
use bdev::Bdev;
use loadgen::keys::dhchap_keys;
use loadgen::run::{run, RunParams, DEFAULT_HOSTNQN};
use loadgen::workload::Pattern;
use nvmf::keys::DhchapSecret;
use nvmf_tgt::{HostKeys, NamedKey, SubsystemConfig, Target, TransportOptions};
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:loadgen-dhchap";

#[test]
fn runs_with_its_key_files_and_is_refused_without() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let target = Target::new(TransportOptions::default(), metrics::Registry::new()).unwrap();
    let sub = target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
    let bdev = Arc::new(Bdev::Malloc(MallocBdev::new("Malloc0", 4096, 512).unwrap()));
    sub.add_namespace(Some(1), bdev, None, None).unwrap();
    let host = DhchapSecret::from_key(None, &[4; 32]).unwrap();
    let ctrlr = DhchapSecret::from_key(None, &[5; 32]).unwrap();
    let named = |name: &str, s: &DhchapSecret| {
        Some(Arc::new(NamedKey {
            name: name.into(),
            secret: s.clone(),
        }))
    };
    sub.add_host(
        DEFAULT_HOSTNQN,
        HostKeys {
            host: named("key0", &host),
            ctrlr: named("ckey0", &ctrlr),
            psk: None,
            pending: false,
        },
    )
    .unwrap();
    let addr = rt
        .block_on(target.add_listener(NQN, "127.0.0.1:0".parse().unwrap(), None, None))
        .unwrap();
    let dir = TempDir::new("loadgen-dhchap");
    let (hf, cf) = (dir.path().join("host"), dir.path().join("ctrl"));
    std::fs::write(&hf, host.encode().as_bytes()).unwrap();
    std::fs::write(&cf, ctrlr.encode().as_bytes()).unwrap();
    let mut p = RunParams {
        addr: addr.to_string(),
        nqn: NQN.into(),
        hostnqn: DEFAULT_HOSTNQN.into(),
        nsid: 1,
        pattern: Pattern::RandRead,
        block_size: 4096,
        queues: 2,
        queue_depth: 4,
        duration: Duration::from_millis(300),
        busy_poll: false,
        dhchap: dhchap_keys(Some(&hf), Some(&cf)).unwrap(),
    };
    let report = run(&p).expect("the keyed run");
    assert!(report.ops > 0);
    p.dhchap = None;
    let e = run(&p).expect_err("no key");
    assert!(e.to_string().contains("Property Set"), "{e}");
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "DHHC-1:01:nonsense:").unwrap();
    assert!(dhchap_keys(Some(&bad), None).is_err());
    rt.block_on(target.shutdown());
}
