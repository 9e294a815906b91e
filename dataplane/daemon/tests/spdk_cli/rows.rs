//! The rows of `spdk_cli.rs`: one stock `spdk-rpc` command per method,
//! in an order where each finds what it needs, with the check of its
//! effect.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use crate::common::{rpc, tcp_listen_address};
use nvmf_host::host::{ConnectParams, HostController, HostError, HostQueue};
use serde_json::{json, Value};

pub const NQN: &str = "nqn.2016-06.io.spdk:cnode1";
pub const DISCOVERY: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// A subsystem reporting ANA states.
pub const ANA_NQN: &str = "nqn.2016-06.io.spdk:ana1";
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000c1";
pub const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000c2";
/// A host that must authenticate (DH-HMAC-CHAP).
pub const KEYED_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000c3";

/// The NVM subsystem's listener, as added and removed.
pub const LISTENER: &[&str] = &[
    NQN,
    "-t",
    "tcp",
    "-f",
    "ipv4",
    "-a",
    "127.0.0.1",
    "-s",
    "{port}",
];
/// The discovery subsystem's listener, as added and removed.
pub const DISCOVERY_LISTENER: &[&str] =
    &["discovery", "-t", "tcp", "-a", "127.0.0.1", "-s", "{dport}"];

/// Methods no stock command sends, with the reason; they are driven
/// elsewhere.
pub const NO_CLI_COMMAND: &[(&str, &str)] = &[
    (
        "rackcache_drop_config_error",
        "needs a start-up call that failed, which this daemon has none of; \
         config_errors.rs drives the plugin's command",
    ),
    (
        "save_config",
        "spdk-rpc's save_config is client-side (framework_get_subsystems and \
         framework_get_config, rows below); the server-side method is driven by \
         spdk_client.rs",
    ),
    (
        "keyring_memory_add_key",
        "the operator's key delivery: a secret on a command line would show in \
         ps; the command line's way is keyring_file_add_key. Driven by \
         dhchap.rs",
    ),
    (
        "keyring_memory_remove_key",
        "the operator's, with keyring_memory_add_key; driven by dhchap.rs",
    ),
];

/// One command of the stock command line.
pub struct Row {
    /// The JSON-RPC method the command sends.
    pub method: &'static str,
    /// Its arguments after `spdk-rpc -s SOCKET`; `{name}` is replaced by
    /// the context's variable `name`.
    pub args: &'static [&'static str],
    /// Asserts the effect, given the command's standard output.
    pub check: fn(&mut Ctx, &str),
}

pub const fn row(
    method: &'static str,
    args: &'static [&'static str],
    check: fn(&mut Ctx, &str),
) -> Row {
    Row {
        method,
        args,
        check,
    }
}

/// What rows share.
pub struct Ctx {
    pub socket: PathBuf,
    pub vars: HashMap<&'static str, String>,
    /// A host connected to the NVM subsystem (admin and two I/O queues).
    pub host: Option<HostController>,
    /// A host not on the allow list, connected while any host may.
    pub other: Option<HostController>,
}

impl Ctx {
    fn rpc(&self, method: &str, params: Value) -> Value {
        rpc(&self.socket, method, params)
    }

    fn var(&self, k: &str) -> &str {
        &self.vars[k]
    }

    /// Connect parameters for `hostnqn` to `subnqn` at port variable `port`.
    fn params(&self, port: &str, subnqn: &str, hostnqn: &str) -> ConnectParams {
        ConnectParams {
            addr: format!("127.0.0.1:{}", self.var(port)),
            subnqn: subnqn.into(),
            hostnqn: hostnqn.into(),
            host_id: [0xc1; 16],
            queue_size: 32,
            kato_ms: 0,
        }
    }

    fn connect(&self, hostnqn: &str, io_queues: u16) -> Result<HostController, HostError> {
        HostController::connect(&self.params("port", NQN, hostnqn), io_queues)
    }

    fn subsystem(&self, nqn: &str) -> Value {
        self.rpc("nvmf_get_subsystems", json!({ "nqn": nqn }))[0].take()
    }

    fn controllers(&self) -> Vec<Value> {
        let v = self.rpc("nvmf_subsystem_get_controllers", json!({ "nqn": NQN }));
        v.as_array().expect("an array").clone()
    }

    fn bdev_names(&self) -> BTreeSet<String> {
        let v = self.rpc("bdev_get_bdevs", json!({}));
        v.as_array()
            .expect("an array")
            .iter()
            .map(|b| b["name"].as_str().expect("a name").to_owned())
            .collect()
    }
}

/// The ANA state of each group, in order, as the ANA subsystem's one
/// listener reports them (`nvmf_subsystem_get_listeners`).
fn ana_states(c: &Ctx) -> Vec<String> {
    let l = c.rpc("nvmf_subsystem_get_listeners", json!({ "nqn": ANA_NQN }));
    assert_eq!(l[0]["address"], tcp_listen_address(c.var("aport")));
    l[0]["ana_states"]
        .as_array()
        .expect("ana_states")
        .iter()
        .enumerate()
        .map(|(i, s)| {
            assert_eq!(s["ana_group"], json!(i + 1));
            s["ana_state"].as_str().expect("a state").to_owned()
        })
        .collect()
}

pub fn parse(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

/// The host's queues were closed by the target.
pub fn closed(c: &mut HostController) {
    assert!(c.admin.keep_alive().is_err(), "admin queue still open");
    for q in &mut c.io {
        let mut b = vec![0u8; 512];
        assert!(
            q.read_blocks(1, 0, 512, &mut b).is_err(),
            "I/O queue still open"
        );
    }
}

pub fn refused_as_invalid_host(r: Result<HostController, HostError>) {
    match r {
        Err(HostError::Status { cqe, .. }) => {
            assert_eq!(
                (cqe.status.sct, cqe.status.sc),
                (1, 0x84),
                "Connect Invalid Host"
            )
        }
        Err(e) => panic!("Connect failed otherwise: {e}"),
        Ok(_) => panic!("Connect accepted"),
    }
}

pub fn listen_ports(sub: &Value) -> Vec<String> {
    sub["listen_addresses"]
        .as_array()
        .expect("listen_addresses")
        .iter()
        .map(|l| l["trsvcid"].as_str().expect("trsvcid").to_owned())
        .collect()
}

/// The rows, in the order they run.
pub fn rows() -> Vec<Row> {
    vec![
        row("spdk_get_version", &[], |_, out| {
            assert_eq!(parse(out)["fields"]["major"], 26);
        }),
        row("rackcache_get_addresses", &[], |_, out| {
            // Every host has its loopback address, up.
            let addrs = parse(out);
            assert!(
                addrs
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["address"] == "127.0.0.1" && a["up"] == true),
                "{addrs}"
            );
        }),
        row("rackcache_get_config_errors", &[], |_, out| {
            assert_eq!(parse(out), json!([]), "a clean start keeps no failed call");
        }),
        row("rackcache_retry_config_errors", &[], |_, out| {
            assert_eq!(
                parse(out),
                json!({"retried": 0, "succeeded": 0, "failing": 0})
            );
        }),
        row("rpc_get_methods", &[], |_, out| {
            assert!(parse(out)
                .as_array()
                .unwrap()
                .contains(&json!("nvmf_get_stats")));
        }),
        row("framework_get_subsystems", &[], |_, out| {
            let names: Vec<Value> = parse(out)
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["subsystem"].clone())
                .collect();
            assert_eq!(names, [json!("keyring"), json!("bdev"), json!("nvmf")]);
        }),
        row(
            "bdev_malloc_create",
            &["-b", "Malloc0", "16", "512"],
            |c, out| {
                assert_eq!(out.trim(), "Malloc0");
                assert!(c.bdev_names().contains("Malloc0"));
            },
        ),
        row(
            "bdev_malloc_create",
            &["-b", "Malloc1", "8", "4096"],
            |c, _| {
                let b = c.rpc("bdev_get_bdevs", json!({ "name": "Malloc1" }));
                assert_eq!(
                    (b[0]["block_size"].clone(), b[0]["num_blocks"].clone()),
                    (json!(4096), json!(2048))
                );
            },
        ),
        row("bdev_get_bdevs", &["-b", "Malloc0"], |_, out| {
            let v = parse(out);
            assert_eq!(
                (v[0]["name"].clone(), v[0]["num_blocks"].clone()),
                (json!("Malloc0"), json!(32768))
            );
        }),
        row("bdev_get_iostat", &[], |_, out| {
            assert_eq!(parse(out)["bdevs"].as_array().unwrap().len(), 2);
        }),
        row(
            "bdev_get_iostat",
            &["--names", "Malloc1,Malloc0"],
            |_, out| {
                let v = parse(out);
                let names: Vec<Value> = v["bdevs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b["name"].clone())
                    .collect();
                assert_eq!(names, [json!("Malloc1"), json!("Malloc0")]);
            },
        ),
        row(
            "bdev_aio_create",
            &["{work}/aio0.img", "aio0", "4096"],
            |c, out| {
                assert_eq!(out.trim(), "aio0");
                assert!(c.bdev_names().contains("aio0"));
            },
        ),
        row(
            "bdev_rbd_register_cluster",
            &[
                "ceph",
                "--user",
                "{ceph_user}",
                "--config-param",
                "mon_host={ceph_mon}",
                "--config-param",
                "key={ceph_key}",
            ],
            |_, out| assert_eq!(out.trim(), "ceph"),
        ),
        row(
            "bdev_rbd_create",
            &["-b", "Ceph0", "-c", "ceph", "{ceph_pool}", "vol1", "4096"],
            |c, out| {
                assert_eq!(out.trim(), "Ceph0");
                assert!(c.bdev_names().contains("Ceph0"));
            },
        ),
        row("bdev_rbd_resize", &["Ceph0", "48"], |c, out| {
            assert_eq!(out.trim(), "true");
            let b = c.rpc("bdev_get_bdevs", json!({ "name": "Ceph0" }));
            assert_eq!(b[0]["num_blocks"], json!(48 * 1024 * 1024 / 4096));
        }),
        row("bdev_rbd_get_clusters_info", &["-b", "ceph"], |c, out| {
            let info = parse(out);
            assert_eq!(info["cluster_name"], "ceph");
            assert_eq!(info["user_id"].as_str(), Some(c.var("ceph_user")));
            let addr = info["client_address"].as_str().expect("an address");
            assert!(addr.contains('/'), "IP:PORT/NONCE: {addr}");
            assert!(!out.contains(c.var("ceph_key")), "the cephx key: {out}");
            assert_eq!(c.rpc("bdev_rbd_get_clusters_info", json!({}))[0], info);
        }),
        // Another server's client (an address no connection has): Ceph
        // takes it; rbd_blocklist.rs fences a real one.
        row(
            "bdev_rbd_blocklist_add",
            &["ceph", "127.0.0.1:0/4242", "--expire-seconds", "60"],
            |_, out| assert_eq!(out.trim(), "true"),
        ),
        row("nvmf_create_transport", &["-t", "TCP"], |c, _| {
            assert_eq!(
                c.rpc("nvmf_get_transports", json!({}))
                    .as_array()
                    .unwrap()
                    .len(),
                1
            );
        }),
        row("nvmf_get_transports", &[], |_, out| {
            assert_eq!(parse(out)[0]["trtype"], "TCP");
        }),
        row(
            "nvmf_create_subsystem",
            &[NQN, "-s", "RC0001", "-d", "rackcache volume"],
            |c, _| {
                let s = c.subsystem(NQN);
                assert_eq!(
                    (s["serial_number"].clone(), s["allow_any_host"].clone()),
                    (json!("RC0001"), json!(false))
                );
            },
        ),
        // The command prints nothing; the namespaces get nsids 1 and 2.
        row("nvmf_subsystem_add_ns", &[NQN, "Malloc0"], |c, _| {
            let ns = &c.subsystem(NQN)["namespaces"][0];
            assert_eq!(
                (ns["nsid"].clone(), ns["bdev_name"].clone()),
                (json!(1), json!("Malloc0"))
            );
        }),
        row("nvmf_subsystem_add_ns", &[NQN, "Ceph0"], |c, _| {
            let ns = &c.subsystem(NQN)["namespaces"][1];
            assert_eq!(
                (ns["nsid"].clone(), ns["bdev_name"].clone()),
                (json!(2), json!("Ceph0"))
            );
        }),
        row("nvmf_subsystem_add_host", &[NQN, HOST], |c, _| {
            assert_eq!(c.subsystem(NQN)["hosts"], json!([{ "nqn": HOST }]));
        }),
        row("keyring_file_add_key", &["key0", "{work}/key0"], |c, _| {
            assert_eq!(c.rpc("keyring_get_keys", json!(null))[0]["name"], "key0");
        }),
        row(
            "keyring_file_add_key",
            &["ckey0", "{work}/ckey0"],
            |_, _| {},
        ),
        row("keyring_get_keys", &[], |c, out| {
            let keys = parse(out);
            let names: Vec<&Value> = keys
                .as_array()
                .unwrap()
                .iter()
                .map(|k| &k["name"])
                .collect();
            assert_eq!(names, [&json!("key0"), &json!("ckey0")]);
            assert_eq!(keys[1]["path"], json!(format!("{}/ckey0", c.var("work"))));
        }),
        row(
            "nvmf_set_config",
            &[
                "--dhchap-digests",
                "sha256,sha512",
                "--dhchap-dhgroups",
                "null,ffdhe2048",
            ],
            |c, _| {
                let nvmf = c.rpc("framework_get_config", json!({ "name": "nvmf" }));
                assert_eq!(
                    nvmf[0],
                    json!({ "method": "nvmf_set_config", "params": {
                        "dhchap_digests": ["sha256", "sha512"],
                        "dhchap_dhgroups": ["null", "ffdhe2048"],
                    }})
                );
            },
        ),
        row(
            "nvmf_subsystem_add_host",
            &[
                NQN,
                KEYED_HOST,
                "--dhchap-key",
                "key0",
                "--dhchap-ctrlr-key",
                "ckey0",
            ],
            |c, _| {
                assert_eq!(
                    c.subsystem(NQN)["hosts"][1],
                    json!({ "nqn": KEYED_HOST, "dhchap_key": "key0", "dhchap_ctrlr_key": "ckey0" })
                );
            },
        ),
        row(
            "nvmf_subsystem_set_keys",
            &[NQN, KEYED_HOST, "--dhchap-key", "ckey0"],
            |c, _| {
                assert_eq!(
                    c.subsystem(NQN)["hosts"][1],
                    json!({ "nqn": KEYED_HOST, "dhchap_key": "ckey0" })
                );
                // A key a host uses stays.
                let e = crate::common::unix_rpc(
                    &c.socket,
                    "keyring_file_remove_key",
                    json!({ "name": "ckey0" }),
                )
                .expect_err("a key in use was removed");
                assert!(e.to_string().contains("in use"), "{e}");
            },
        ),
        row("keyring_file_remove_key", &["key0"], |c, _| {
            let keys = c.rpc("keyring_get_keys", json!(null));
            assert_eq!(keys.as_array().unwrap().len(), 1);
        }),
        row("nvmf_subsystem_add_listener", LISTENER, |c, _| {
            assert_eq!(listen_ports(&c.subsystem(NQN)), [c.var("port")]);
            // A host can now connect.
            c.host = Some(c.connect(HOST, 2).expect("the allowed host connects"));
        }),
        // SPDK's well-known discovery port, as ceph-nvmeof and
        // `nvme connect-all -s 8009` users serve it.
        row("nvmf_subsystem_add_listener", DISCOVERY_LISTENER, |c, _| {
            assert_eq!(listen_ports(&c.subsystem(DISCOVERY)), [c.var("dport")]);
            let p = c.params("dport", DISCOVERY, HOST);
            let mut d = HostQueue::connect(&p, 0, 0).expect("discovery on its own listener");
            d.enable().unwrap();
            let log = d.get_log_page(0x70, 0, 3072).unwrap();
            assert_eq!(
                u64::from_le_bytes(log[8..16].try_into().unwrap()),
                2,
                "discovery and cnode1"
            );
        }),
        row("nvmf_get_subsystems", &[], |_, out| {
            let nqns: Vec<Value> = parse(out)
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["nqn"].clone())
                .collect();
            assert_eq!(nqns, [json!(DISCOVERY), json!(NQN)]);
        }),
        row("nvmf_subsystem_get_listeners", &[NQN], |c, out| {
            let v = parse(out);
            assert_eq!(v, json!([{ "address": tcp_listen_address(c.var("port")) }]));
        }),
        row("nvmf_subsystem_get_controllers", &[NQN], |c, out| {
            let v = parse(out);
            let cntlid = c.host.as_ref().unwrap().admin.cntlid;
            assert_eq!(
                v,
                json!([{
                "cntlid": cntlid, "cntrltype": "io", "hostnqn": HOST,
                "hostid": "c1c1c1c1-c1c1-c1c1-c1c1-c1c1c1c1c1c1", "num_io_qpairs": 2 }])
            );
        }),
        row("nvmf_subsystem_get_qpairs", &[NQN], |c, out| {
            let v = parse(out);
            let q = v.as_array().unwrap();
            assert_eq!(
                q.iter()
                    .map(|q| q["qid"].as_u64().unwrap())
                    .collect::<Vec<_>>(),
                [0, 1, 2]
            );
            for q in q {
                assert_eq!(q["state"], "enabled");
                assert_eq!(q["hostnqn"], HOST);
                assert_eq!(q["listen_address"]["trsvcid"], c.var("port"));
                assert_eq!(q["peer_address"]["traddr"], "127.0.0.1");
            }
        }),
        row("nvmf_get_stats", &[], |_, out| {
            let v = parse(out);
            let g = &v["poll_groups"][0];
            assert_eq!(
                (g["current_io_qpairs"].clone(), g["io_qpairs"].clone()),
                (json!(2), json!(2))
            );
            // The host's controller, and the discovery controller (which
            // may still be closing).
            assert!(
                g["admin_qpairs"] == json!(2) && g["current_admin_qpairs"].as_u64().unwrap() >= 1,
                "{g}"
            );
            assert_eq!(g["transports"], json!([{ "trtype": "TCP" }]));
        }),
        row("framework_get_config", &["nvmf"], |_, out| {
            let listeners: Vec<Value> = parse(out)
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["method"] == "nvmf_subsystem_add_listener")
                .map(|m| m["params"]["nqn"].clone())
                .collect();
            assert_eq!(
                listeners,
                [json!(DISCOVERY), json!(NQN)],
                "discovery listeners are saved"
            );
        }),
        row("framework_get_config", &["bdev"], |_, out| {
            assert!(out.contains("Malloc1"));
        }),
        row(
            "nvmf_subsystem_allow_any_host",
            &[NQN, "--allow-any-host"],
            |c, _| {
                assert_eq!(c.subsystem(NQN)["allow_any_host"], true);
                c.other = Some(c.connect(OTHER_HOST, 1).expect("any host may connect"));
                assert_eq!(c.controllers().len(), 2);
            },
        ),
        row(
            "nvmf_subsystem_allow_any_host",
            &[NQN, "--no-allow-any-host"],
            |c, _| {
                assert_eq!(c.subsystem(NQN)["allow_any_host"], false);
                // The host not on the list lost its controller; the listed
                // one kept its own.
                closed(c.other.as_mut().unwrap());
                let list = c.controllers();
                assert_eq!((list.len(), list[0]["hostnqn"].clone()), (1, json!(HOST)));
                refused_as_invalid_host(c.connect(OTHER_HOST, 1));
            },
        ),
        row("nvmf_subsystem_remove_host", &[NQN, HOST], |c, _| {
            assert_eq!(
                c.subsystem(NQN)["hosts"],
                json!([{ "nqn": KEYED_HOST, "dhchap_key": "ckey0" }])
            );
            // Revoked: the controller list shrank, the queues are gone and
            // the host cannot come back.
            assert_eq!(c.controllers(), Vec::<Value>::new());
            closed(c.host.as_mut().unwrap());
            refused_as_invalid_host(c.connect(HOST, 1));
        }),
        row(
            "nvmf_subsystem_remove_listener",
            DISCOVERY_LISTENER,
            |c, _| {
                assert_eq!(listen_ports(&c.subsystem(DISCOVERY)), Vec::<String>::new());
            },
        ),
        row("nvmf_subsystem_remove_listener", LISTENER, |c, _| {
            assert_eq!(listen_ports(&c.subsystem(NQN)), Vec::<String>::new());
        }),
        row("nvmf_subsystem_remove_ns", &[NQN, "2"], |c, _| {
            assert_eq!(c.subsystem(NQN)["namespaces"].as_array().unwrap().len(), 1);
        }),
        row("nvmf_delete_subsystem", &[NQN], |c, _| {
            let all = c.rpc("nvmf_get_subsystems", json!({}));
            assert_eq!(all.as_array().unwrap().len(), 1, "only discovery left");
        }),
        // ANA reporting: a listener added inaccessible, then one group of
        // it made optimized. Its controller ids come from a range of their
        // own (a second server exporting it would take another).
        row(
            "nvmf_create_subsystem",
            &[ANA_NQN, "-a", "-r", "-m", "4", "-i", "4096", "-I", "8190"],
            |c, _| {
                let s = c.subsystem(ANA_NQN);
                assert_eq!(s["max_namespaces"], json!(4));
                assert_eq!(s["ana_reporting"], json!(true));
                assert_eq!(
                    (&s["min_cntlid"], &s["max_cntlid"]),
                    (&json!(4096), &json!(8190))
                );
            },
        ),
        row(
            "nvmf_subsystem_add_listener",
            &[
                ANA_NQN,
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-s",
                "{aport}",
                "-n",
                "inaccessible",
            ],
            |c, _| {
                assert_eq!(ana_states(c), ["inaccessible"; 4]);
            },
        ),
        row(
            "nvmf_subsystem_listener_set_ana_state",
            &[
                ANA_NQN,
                "-n",
                "optimized",
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-s",
                "{aport}",
                "-g",
                "2",
            ],
            |c, _| {
                let want = ["inaccessible", "optimized", "inaccessible", "inaccessible"];
                assert_eq!(ana_states(c), want);
            },
        ),
        // A lease long enough for the rest of the run (it is never taken
        // back): nothing is fenced.
        row(
            "rackcache_lease_renew",
            &["spdk-cli", "600000"],
            |c, out| {
                let left = parse(out)["expires_in_ms"].as_u64().expect("ms left");
                assert!(left <= 600_000, "{out}");
                let want = ["inaccessible", "optimized", "inaccessible", "inaccessible"];
                assert_eq!(ana_states(c), want);
            },
        ),
        row("rackcache_lease_get", &[], |_, out| {
            let l = parse(out);
            assert_eq!((&l["granted"], &l["fenced"]), (&json!(true), &json!(false)));
            assert_eq!(l["holder"], "spdk-cli");
        }),
        row("nvmf_delete_subsystem", &[ANA_NQN], |c, _| {
            let all = c.rpc("nvmf_get_subsystems", json!({}));
            assert_eq!(all.as_array().unwrap().len(), 1, "only discovery left");
        }),
        row("bdev_rbd_delete", &["Ceph0"], |c, _| {
            assert!(!c.bdev_names().contains("Ceph0"));
        }),
        row("bdev_rbd_unregister_cluster", &["ceph"], |c, _| {
            // The name is free again: registering it works (and is undone).
            let params = json!({
                "name": "ceph",
                "user_id": c.var("ceph_user"),
                "config_param": { "mon_host": c.var("ceph_mon"), "key": c.var("ceph_key") },
            });
            assert_eq!(c.rpc("bdev_rbd_register_cluster", params), json!("ceph"));
            c.rpc("bdev_rbd_unregister_cluster", json!({ "name": "ceph" }));
        }),
        row("bdev_aio_delete", &["aio0"], |c, _| {
            assert!(!c.bdev_names().contains("aio0"));
        }),
        // Fault injection: a delay bdev on F0, an error bdev on F1.
        row("bdev_malloc_create", &["-b", "F0", "8", "512"], |c, _| {
            assert!(c.bdev_names().contains("F0"));
        }),
        row("bdev_malloc_create", &["-b", "F1", "8", "512"], |c, _| {
            assert!(c.bdev_names().contains("F1"));
        }),
        row(
            "bdev_delay_create",
            &[
                "-b", "F0", "-d", "D0", "-r", "100", "-t", "200", "-w", "300", "-n", "400",
            ],
            |c, out| {
                assert_eq!(out.trim(), "D0");
                let f0 = c.rpc("bdev_get_bdevs", json!({ "name": "F0" }));
                assert_eq!(
                    f0[0]["claimed"],
                    json!(true),
                    "the delay bdev claims its base"
                );
            },
        ),
        row(
            "bdev_delay_update_latency",
            &["D0", "avg_read", "150"],
            |c, _| {
                let d0 = c.rpc("bdev_get_bdevs", json!({ "name": "D0" }));
                let delay = &d0[0]["driver_specific"]["delay"];
                assert_eq!(delay["avg_read_latency"], json!(150));
                assert_eq!(delay["base_bdev_name"], json!("F0"));
            },
        ),
        row("bdev_error_create", &["F1"], |c, out| {
            assert_eq!(out.trim(), "EE_F1");
            assert!(c.bdev_names().contains("EE_F1"));
        }),
        row(
            "bdev_error_inject_error",
            &[
                "EE_F1",
                "read",
                "corrupt_data",
                "-n",
                "2",
                "-o",
                "7",
                "-v",
                "255",
            ],
            |_, _| {},
        ),
        row(
            "bdev_error_inject_error",
            &["EE_F1", "write", "pending"],
            |_, _| {},
        ),
        row("bdev_error_resume_pending", &["EE_F1"], |_, _| {}),
        row("bdev_delay_delete", &["D0"], |c, _| {
            assert!(!c.bdev_names().contains("D0"));
        }),
        row("bdev_error_delete", &["EE_F1"], |c, _| {
            assert!(!c.bdev_names().contains("EE_F1"));
        }),
        row("bdev_malloc_delete", &["F0"], |c, _| {
            assert!(!c.bdev_names().contains("F0"));
        }),
        row("bdev_malloc_delete", &["F1"], |c, _| {
            assert!(!c.bdev_names().contains("F1"));
        }),
        // Cached bdevs, through rackcache's plugin (python/rackcache_rpc_plugin.py):
        // a malloc core and an aio cache bdev.
        row(
            "bdev_malloc_create",
            &["-b", "AcCore", "8", "512"],
            |c, _| {
                assert!(c.bdev_names().contains("AcCore"));
            },
        ),
        row(
            "bdev_aio_create",
            &["{work}/cache.img", "AcCache", "4096"],
            |c, _| assert!(c.bdev_names().contains("AcCache")),
        ),
        row(
            "bdev_adacache_create",
            &[
                "AC0",
                "AcCore",
                "AcCache",
                "16",
                "-w",
                "wb",
                "-m",
                "fixed",
                "--block-sizes-kib",
                "32",
                "--cleaning",
                "lazy",
                "--wake-up-ms",
                "1000",
                "--seq-cutoff",
                "never",
            ],
            |c, out| {
                assert_eq!(out.trim(), "AC0");
                for base in ["AcCore", "AcCache"] {
                    let b = c.rpc("bdev_get_bdevs", json!({ "name": base }));
                    assert_eq!(b[0]["claimed"], json!(true), "{base} is claimed");
                }
                let p = &c.rpc("bdev_adacache_get_bdevs", json!({ "name": "AC0" }))[0]["params"];
                assert_eq!(
                    (p["write_mode"].clone(), p["block_sizes_kib"].clone()),
                    (json!("wb"), json!([32]))
                );
                assert_eq!(p["cleaning"]["wake_up_ms"], json!(1000));
                assert_eq!(p["seq_cutoff"]["policy"], json!("never"));
            },
        ),
        row("bdev_adacache_get_bdevs", &["AC0"], |_, out| {
            let v = parse(out);
            assert_eq!(
                (
                    v[0]["core_bdev_name"].clone(),
                    v[0]["cache_size_mib"].clone()
                ),
                (json!("AcCore"), json!(16))
            );
        }),
        row("bdev_adacache_get_devices", &[], |_, out| {
            let v = parse(out);
            assert_eq!(v[0]["cache_bdev_name"], json!("AcCache"));
            assert_eq!(v[0]["volumes"][0]["name"], json!("AC0"), "{out}");
        }),
        row("bdev_adacache_get_stats", &["AC0"], |_, out| {
            let v = parse(out);
            assert_eq!(v["usage"]["capacity_bytes"], json!(16u64 << 20));
            assert_eq!(v["mrc"]["miss_ratio"].as_array().map(Vec::len), Some(5));
            // The dataplane's default eviction: online choice, starting
            // with SIEVE.
            assert_eq!(v["eviction"]["configured"], json!("auto"), "{out}");
            assert_eq!(v["eviction"]["policy"], json!("sieve"), "{out}");
            assert_eq!(v["eviction"]["auto"]["active"], json!("sieve"), "{out}");
            assert_eq!(v["eviction"]["auto"]["switches"], json!(0), "{out}");
        }),
        row("bdev_adacache_get_mrc", &["AC0"], |_, out| {
            // No I/O yet: an empty curve at the volume's smallest block.
            assert_eq!(
                parse(out),
                json!({"name": "AC0", "block_size": 32768, "references": 0,
                       "capacity_bytes": 16u64 << 20, "miss_ratio_at_capacity": 0.0,
                       "points": []})
            );
        }),
        row("bdev_adacache_reset_stats", &["AC0"], |_, out| {
            assert_eq!(out.trim(), "true");
        }),
        row("bdev_adacache_flush", &["AC0"], |_, out| {
            assert_eq!(out.trim(), "true");
        }),
        row("bdev_adacache_flush_status", &["AC0"], |_, out| {
            assert_eq!(parse(out)["dirty_bytes"], json!(0));
        }),
        row("bdev_adacache_set_mode", &["AC0", "wt"], |c, _| {
            let v = c.rpc("bdev_adacache_get_bdevs", json!({ "name": "AC0" }));
            assert_eq!(v[0]["write_mode"], json!("wt"));
        }),
        row(
            "bdev_adacache_set_policy",
            &[
                "AC0",
                "--admission",
                "nhit:2",
                "--cleaning",
                "aggressive",
                "--dirty-ratio",
                "0.5",
            ],
            |c, _| {
                let v = c.rpc("bdev_adacache_get_bdevs", json!({ "name": "AC0" }));
                assert_eq!(v[0]["params"]["admission"], json!("nhit:2"));
                assert_eq!(v[0]["params"]["cleaning"]["dirty_ratio"], json!(0.5));
            },
        ),
        row("bdev_adacache_resize", &["AC0", "8"], |c, _| {
            let v = c.rpc("bdev_adacache_get_devices", json!({}));
            assert_eq!(v[0]["volumes"][0]["cache_size_mib"], json!(8));
        }),
        row(
            "bdev_adacache_set_role",
            &["AC0", "mirror", "-e", "2"],
            |c, _| {
                let s = c.rpc("bdev_adacache_get_stats", json!({ "name": "AC0" }));
                assert_eq!(
                    (&s["role"], &s["epoch"]),
                    (&json!("mirror"), &json!(2)),
                    "{s}"
                );
                let v = c.rpc("bdev_adacache_get_bdevs", json!({ "name": "AC0" }));
                assert_eq!(v[0]["params"]["role"], json!("mirror"), "saved");
                c.rpc(
                    "bdev_adacache_set_role",
                    json!({ "name": "AC0", "role": "owner" }),
                );
            },
        ),
        // Dropping a mirror it does not have changes nothing (connecting
        // one: mirror.rs).
        row("bdev_adacache_set_mirror", &["AC0"], |c, _| {
            let s = c.rpc("bdev_adacache_get_stats", json!({ "name": "AC0" }));
            assert!(s.get("replica").is_none(), "{s}");
        }),
        row("bdev_adacache_delete", &["AC0"], |c, _| {
            assert!(!c.bdev_names().contains("AC0"));
            assert_eq!(
                c.rpc("bdev_get_bdevs", json!({ "name": "AcCore" }))[0]["claimed"],
                json!(false)
            );
        }),
        // Fill sizing by locality: the 4 KiB floor first, and its shadows
        // in the stats.
        row(
            "bdev_adacache_create",
            &["AC1", "AcCore", "AcCache", "8", "--fill-size", "locality"],
            |c, out| {
                assert_eq!(out.trim(), "AC1");
                let p = &c.rpc("bdev_adacache_get_bdevs", json!({ "name": "AC1" }))[0]["params"];
                assert_eq!(p["fill_size"], json!("locality"), "{p}");
                let s = c.rpc("bdev_adacache_get_stats", json!({ "name": "AC1" }));
                assert_eq!(s["fill"]["floor_bytes"], json!(4096), "{s}");
                assert_eq!(s["fill"]["shadows"].as_array().map(Vec::len), Some(5));
            },
        ),
        row("bdev_adacache_delete", &["AC1"], |c, _| {
            assert!(!c.bdev_names().contains("AC1"));
        }),
        row("bdev_aio_delete", &["AcCache"], |c, _| {
            assert!(!c.bdev_names().contains("AcCache"));
        }),
        row("bdev_malloc_delete", &["AcCore"], |c, _| {
            assert!(!c.bdev_names().contains("AcCore"));
        }),
        row("bdev_malloc_delete", &["Malloc1"], |c, _| {
            assert!(!c.bdev_names().contains("Malloc1"));
        }),
    ]
}
