"""Drives rackcache-dataplane with SPDK's own Python JSON-RPC client.

Usage: spdk_rpc_client.py SOCKET WORKDIR first|restart [CEPH_ENV_FILE]

`first` creates one object of every kind (bdevs, then the NVMe/TCP
transport, subsystems, namespaces, hosts and listeners), deletes some again,
checks that duplicates, unknown names, bad parameters and unknown methods are
refused with SPDK's error codes and change nothing, and saves the
configuration (with SPDK's client-side save_config) to WORKDIR/config.json,
the bdev list to WORKDIR/bdevs.json and the nvmf state to WORKDIR/nvmf.json.
`restart` runs against a daemon started with --config WORKDIR/config.json and
checks that the same bdevs are back, with the same identities, and the same
transport, subsystems, listeners, namespaces and hosts.
"""

import io
import json
import os
import socket
import sys

from spdk.rpc import config as spdk_config
from spdk.rpc.client import JSONRPCClient, JSONRPCException

sock, workdir, phase = sys.argv[1], sys.argv[2], sys.argv[3]
ceph = {}
if len(sys.argv) > 4:
    with open(sys.argv[4]) as f:
        ceph = dict(line.strip().split("=", 1) for line in f if "=" in line)

client = JSONRPCClient(sock, timeout=60.0)


def call(method, **params):
    return client.call(method, params)


def snapshot():
    return (call("bdev_get_bdevs"), call("nvmf_get_transports"), call("nvmf_get_subsystems"))


def expect_error(code, method, **params):
    before = snapshot()
    try:
        call(method, **params)
    except JSONRPCException as e:
        assert f'"code": {code}' in str(e), f"{method}: want code {code}, got:\n{e}"
    else:
        raise AssertionError(f"{method}({params}) succeeded; want error {code}")
    assert snapshot() == before, f"failed {method} changed the bdevs or the nvmf state"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def subsystems():
    return {s["nqn"]: s for s in call("nvmf_get_subsystems")}


def names():
    return [b["name"] for b in call("bdev_get_bdevs")]


EINVAL, ENOENT, EEXIST, ENODEV, EBUSY = -22, -2, -17, -19, -16
INVALID_PARAMS, METHOD_NOT_FOUND, INTERNAL_ERROR = -32602, -32601, -32603
DISCOVERY = "nqn.2014-08.org.nvmexpress.discovery"
CNODE1 = "nqn.2016-06.io.spdk:cnode1"
CNODE2 = "nqn.2016-06.io.spdk:cnode2"
CNODE3 = "nqn.2016-06.io.spdk:cnode3"
HOST1 = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-000000000001"
HOST2 = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-000000000002"
NGUID = "000102030405060708090A0B0C0D0E0F"
UUID = "ceccf520-691e-4b46-9546-34af789907c5"


def la(port, traddr="127.0.0.1", trtype="TCP", adrfam="IPv4"):
    """A listen_address as SPDK's rpc.py groups it."""
    return {"trtype": trtype, "adrfam": adrfam, "traddr": traddr, "trsvcid": str(port)}


def nvmf_first_phase():
    """Every nvmf object kind through SPDK's client; the parameters rpc.py's
    command line sends by default (false flags included) are spelled out."""
    assert call("nvmf_get_transports") == []
    assert [s["nqn"] for s in call("nvmf_get_subsystems")] == [DISCOVERY]
    expect_error(INVALID_PARAMS, "nvmf_create_subsystem", nqn=CNODE1)

    # Transport.
    cli_defaults = dict(no_srq=False, c2h_success=True, zcopy=False, dif_insert_or_strip=False,
                        no_wr_batching=False, disable_mappable_bar0=False,
                        disable_adaptive_irq=False, disable_shadow_doorbells=False,
                        disable_command_passthru=False)
    expect_error(INVALID_PARAMS, "nvmf_create_transport", trtype="RDMA", **cli_defaults)
    expect_error(INVALID_PARAMS, "nvmf_create_transport", trtype="TCP", colour="blue")
    expect_error(INVALID_PARAMS, "nvmf_create_transport", trtype="TCP", max_queue_depth=1)
    expect_error(INVALID_PARAMS, "nvmf_create_transport", trtype="TCP", max_io_size=5000)
    expect_error(INVALID_PARAMS, "nvmf_create_transport", trtype="TCP", dif_insert_or_strip=True)
    expect_error(INVALID_PARAMS, "nvmf_create_transport", trtype="TCP", tgt_name="other")
    assert call("nvmf_create_transport", trtype="TCP", max_queue_depth=64,
                max_io_qpairs_per_ctrlr=8, in_capsule_data_size=8192, max_io_size=262144,
                io_unit_size=65536, num_shared_buffers=511, **cli_defaults) is True
    expect_error(INTERNAL_ERROR, "nvmf_create_transport", trtype="TCP")
    (t,) = call("nvmf_get_transports")
    assert (t["trtype"], t["max_queue_depth"], t["max_io_qpairs_per_ctrlr"],
            t["in_capsule_data_size"], t["max_io_size"], t["io_unit_size"],
            t["max_aq_depth"], t["c2h_success"]) == ("TCP", 64, 8, 8192, 262144, 65536, 128, True), t
    assert call("nvmf_get_transports", trtype="tcp") == [t]
    expect_error(ENODEV, "nvmf_get_transports", trtype="RDMA")

    # Subsystems.
    sub_cli = dict(ana_reporting=False, passthrough=False, enable_nssr=False)
    assert call("nvmf_create_subsystem", nqn=CNODE1, serial_number="RC0001",
                model_number="rackcache test", allow_any_host=False, **sub_cli) is True
    assert call("nvmf_create_subsystem", nqn=CNODE2, allow_any_host=True, max_namespaces=4) is True
    expect_error(INTERNAL_ERROR, "nvmf_create_subsystem", nqn=CNODE1)
    expect_error(INTERNAL_ERROR, "nvmf_create_subsystem", nqn=DISCOVERY)
    expect_error(INVALID_PARAMS, "nvmf_create_subsystem", nqn="iqn.2016-06.io.spdk:x")
    expect_error(INVALID_PARAMS, "nvmf_create_subsystem", nqn=CNODE3, serial_number="x" * 21)
    expect_error(INVALID_PARAMS, "nvmf_create_subsystem", nqn=CNODE3, passthrough=True)
    expect_error(INVALID_PARAMS, "nvmf_create_subsystem", nqn=CNODE3, shape="round")
    expect_error(INVALID_PARAMS, "nvmf_create_subsystem", nqn=CNODE3, max_namespaces=-1)

    # Namespaces: first free nsid, explicit nsid and identifiers; bdevs are claimed.
    assert call("nvmf_subsystem_add_ns", nqn=CNODE1, namespace={"bdev_name": "Malloc0"}) == 1
    assert call("nvmf_subsystem_add_ns", nqn=CNODE1,
                namespace={"bdev_name": "m1", "nsid": 5, "nguid": NGUID, "uuid": UUID,
                           "no_auto_visible": False}) == 5
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_ns", nqn=CNODE1,
                 namespace={"bdev_name": "aio0", "nsid": 5})
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_ns", nqn=CNODE2,
                 namespace={"bdev_name": "Malloc0"})
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_ns", nqn=CNODE1,
                 namespace={"bdev_name": "nope"})
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_ns", nqn=CNODE3,
                 namespace={"bdev_name": "aio0"})
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_ns", nqn=CNODE1,
                 namespace={"bdev_name": "aio0", "nguid": "0102"})
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_ns", nqn=CNODE1,
                 namespace={"bdev_name": "aio0", "eui64": "0001020304050607"})
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_ns", nqn=CNODE2,
                 namespace={"bdev_name": "aio0", "nsid": 5})
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_ns", nqn=CNODE1, bdev_name="aio0")
    if ceph:
        assert call("nvmf_subsystem_add_ns", nqn=CNODE2, namespace={"bdev_name": "Ceph0"}) == 1
    # A claimed bdev cannot be deleted.
    expect_error(EBUSY, "bdev_malloc_delete", name="Malloc0")
    (m0,) = call("bdev_get_bdevs", name="Malloc0")
    assert m0["claimed"] is True and m0["claim_type"] == "exclusive_write", m0
    assert call("bdev_get_bdevs", name="aio0")[0]["claimed"] is False

    # Hosts.
    assert call("nvmf_subsystem_add_host", nqn=CNODE1, host=HOST1) is True
    assert call("nvmf_subsystem_add_host", nqn=CNODE1, host=HOST2) is True
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_host", nqn=CNODE1, host=HOST1)
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_host", nqn=CNODE1, host="host one")
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_host", nqn=CNODE3, host=HOST1)
    # A PSK the keyring does not hold.
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_host", nqn=CNODE1, host=HOST1, psk="key0")
    assert call("nvmf_subsystem_remove_host", nqn=CNODE1, host=HOST2) is True
    expect_error(INVALID_PARAMS, "nvmf_subsystem_remove_host", nqn=CNODE1, host=HOST2)
    assert call("nvmf_subsystem_allow_any_host", nqn=CNODE1, allow_any_host=True) is True
    assert subsystems()[CNODE1]["allow_any_host"] is True
    assert call("nvmf_subsystem_allow_any_host", nqn=CNODE1, allow_any_host=False) is True
    expect_error(INVALID_PARAMS, "nvmf_subsystem_allow_any_host", nqn=CNODE1)

    # Listeners: two subsystems share one port; one advertises another address.
    port = free_port()
    assert call("nvmf_subsystem_add_listener", nqn=CNODE1, listen_address=la(port),
                secure_channel=False) is True
    assert call("nvmf_subsystem_add_listener", nqn=CNODE2, listen_address=la(port),
                rackcache_advertised={"traddr": "10.0.2.100", "trsvcid": "14420"}) is True
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_listener", nqn=CNODE1, listen_address=la(port))
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_listener", nqn=CNODE1,
                 listen_address=la(port, trtype="RDMA"))
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_listener", nqn=CNODE1,
                 listen_address=la(port, traddr="not-an-ip"))
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_listener", nqn=CNODE1,
                 listen_address=la(port, adrfam="IPv6"))
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_listener", nqn=CNODE3,
                 listen_address=la(port))
    # A secure channel where a plain listener is bound: subsystems on one
    # address share its setting.
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_listener", nqn="nqn.2014-08.org.nvmexpress.discovery",
                 listen_address=la(port), secure_channel=True)
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_listener", nqn=CNODE1,
                 listen_address=la(free_port()), rackcache_advertised={"port": 1})
    expect_error(INVALID_PARAMS, "nvmf_subsystem_remove_listener", nqn=CNODE1,
                 listen_address=la(free_port()))
    with socket.socket() as s:  # a port someone else holds
        s.bind(("127.0.0.1", 0))
        s.listen()
        expect_error(-98, "nvmf_subsystem_add_listener", nqn=CNODE1,
                     listen_address=la(s.getsockname()[1]))

    # The discovery subsystem's own listener (SPDK's well-known port 8009 in
    # production), named by its NQN or by the literal "discovery"; saved
    # and restored like any other.
    dport = free_port()
    assert call("nvmf_subsystem_add_listener", nqn="discovery", listen_address=la(dport),
                secure_channel=False) is True
    expect_error(INVALID_PARAMS, "nvmf_subsystem_add_listener", nqn=DISCOVERY,
                 listen_address=la(dport))
    gone_dport = free_port()
    assert call("nvmf_subsystem_add_listener", nqn=DISCOVERY, listen_address=la(gone_dport)) is True
    assert call("nvmf_subsystem_remove_listener", nqn=DISCOVERY,
                listen_address=la(gone_dport)) is True
    assert call("nvmf_subsystem_get_listeners", nqn=DISCOVERY) == [{"address": la(dport)}]

    # One of each kind created and deleted again leaves no trace.
    assert call("nvmf_create_subsystem", nqn=CNODE3, allow_any_host=False) is True
    assert call("nvmf_subsystem_add_ns", nqn=CNODE3, namespace={"bdev_name": "aio0"}) == 1
    assert call("nvmf_subsystem_add_host", nqn=CNODE3, host=HOST1) is True
    gone_port = free_port()
    assert call("nvmf_subsystem_add_listener", nqn=CNODE3, listen_address=la(gone_port)) is True
    assert call("nvmf_subsystem_remove_listener", nqn=CNODE3, listen_address=la(gone_port)) is True
    assert call("nvmf_subsystem_remove_host", nqn=CNODE3, host=HOST1) is True
    assert call("nvmf_subsystem_remove_ns", nqn=CNODE3, nsid=1) is True
    expect_error(INVALID_PARAMS, "nvmf_subsystem_remove_ns", nqn=CNODE3, nsid=1)
    assert call("nvmf_delete_subsystem", nqn=CNODE3) is True
    expect_error(INVALID_PARAMS, "nvmf_delete_subsystem", nqn=CNODE3)
    expect_error(INVALID_PARAMS, "nvmf_get_subsystems", nqn=CNODE3)
    with socket.socket() as s:  # the listener's port was released
        s.bind(("127.0.0.1", gone_port))
    # A namespace removed and its subsystem deleted: the bdev is free again.
    assert call("bdev_get_bdevs", name="aio0")[0]["claimed"] is False
    call("bdev_malloc_create", name="tmp", num_blocks=64, block_size=512)
    assert call("nvmf_create_subsystem", nqn=CNODE3) is True
    assert call("nvmf_subsystem_add_ns", nqn=CNODE3, namespace={"bdev_name": "tmp"}) == 1
    assert call("nvmf_delete_subsystem", nqn=CNODE3) is True
    assert call("bdev_malloc_delete", name="tmp") is True

    # SPDK's result shape.
    subs = subsystems()
    assert list(subs) == [DISCOVERY, CNODE1, CNODE2], list(subs)
    d = subs[DISCOVERY]
    assert (d["subtype"], d["allow_any_host"], d["hosts"]) == ("Discovery", True, [])
    assert d["listen_addresses"] == [la(dport)], d
    c1 = subs[CNODE1]
    assert call("nvmf_get_subsystems", nqn=CNODE1) == [c1]
    assert c1["subtype"] == "NVMe" and c1["allow_any_host"] is False, c1
    assert (c1["serial_number"], c1["model_number"], c1["max_namespaces"]) == \
        ("RC0001", "rackcache test", 32), c1
    assert c1["hosts"] == [{"nqn": HOST1}], c1
    assert c1["listen_addresses"] == [la(port)], c1
    ns = {n["nsid"]: n for n in c1["namespaces"]}
    assert sorted(ns) == [1, 5], ns
    assert ns[1]["bdev_name"] == ns[1]["name"] == "Malloc0"
    assert len(ns[1]["nguid"]) == 32 and len(ns[1]["uuid"]) == 36, ns[1]
    assert (ns[5]["bdev_name"], ns[5]["nguid"], ns[5]["uuid"]) == ("m1", NGUID, UUID), ns[5]
    c2 = subs[CNODE2]
    assert c2["allow_any_host"] is True and c2["max_namespaces"] == 4, c2
    assert c2["listen_addresses"] == [dict(la(port), rackcache_advertised={
        "traddr": "10.0.2.100", "trsvcid": "14420"})], c2
    with open(os.path.join(workdir, "nvmf.json"), "w") as f:
        json.dump({"transports": call("nvmf_get_transports"),
                   "subsystems": call("nvmf_get_subsystems")}, f)
    return port


def nvmf_restart_phase():
    with open(os.path.join(workdir, "nvmf.json")) as f:
        before = json.load(f)
    assert call("nvmf_get_transports") == before["transports"], call("nvmf_get_transports")
    assert call("nvmf_get_subsystems") == before["subsystems"], call("nvmf_get_subsystems")
    # Still claimed after the restart.
    expect_error(EBUSY, "bdev_malloc_delete", name="Malloc0")

if phase == "first":
    v = call("spdk_get_version")
    assert v["fields"]["major"] == 26, v
    methods = call("rpc_get_methods")
    for m in ("bdev_malloc_create", "bdev_rbd_create", "save_config"):
        assert m in methods, methods

    # malloc: default and explicit names; refusals.
    # rpc.py's command line always sends the metadata flags (false).
    assert call("bdev_malloc_create", num_blocks=2048, block_size=512, md_interleave=False,
                dif_is_head_of_md=False) == "Malloc0"
    expect_error(INVALID_PARAMS, "bdev_malloc_create", name="m2", num_blocks=256,
                 block_size=512, md_interleave=True)
    assert call("bdev_malloc_create", name="m1", num_blocks=256, block_size=4096) == "m1"
    expect_error(EEXIST, "bdev_malloc_create", name="m1", num_blocks=256, block_size=4096)
    expect_error(EINVAL, "bdev_malloc_create", name="m2", num_blocks=256, block_size=1000)
    expect_error(INVALID_PARAMS, "bdev_malloc_create", name="m2", num_blocks=256)
    expect_error(INVALID_PARAMS, "bdev_malloc_create", name="m2", num_blocks=256,
                 block_size=512, colour="blue")
    expect_error(INVALID_PARAMS, "bdev_malloc_create", name="m2", num_blocks="many",
                 block_size=512)

    # aio on a file.
    img = os.path.join(workdir, "aio0.img")
    with open(img, "wb") as f:
        f.truncate(4 << 20)
    assert call("bdev_aio_create", name="aio0", filename=img, block_size=4096) == "aio0"
    expect_error(ENOENT, "bdev_aio_create", name="aio1",
                 filename=os.path.join(workdir, "missing.img"), block_size=4096)

    # rbd through a registered cluster, as the restricted user.
    if ceph:
        params = {"mon_host": ceph["RACKCACHE_CEPH_MON_HOST"], "key": ceph["RACKCACHE_CEPH_KEY"]}
        assert call("bdev_rbd_register_cluster", name="ceph", user_id=ceph["RACKCACHE_CEPH_USER"],
                    config_param=params) == "ceph"
        expect_error(EEXIST, "bdev_rbd_register_cluster", name="ceph",
                     user_id=ceph["RACKCACHE_CEPH_USER"], config_param=params)
        expect_error(INVALID_PARAMS, "bdev_rbd_register_cluster", name="c2",
                     config_param={"rbd_cache": "true"})
        assert call("bdev_rbd_create", pool_name=ceph["RACKCACHE_CEPH_POOL"], rbd_name="vol1",
                    block_size=4096, cluster_name="ceph", read_only=False) == "Ceph0"
        expect_error(ENOENT, "bdev_rbd_create", name="r2", pool_name=ceph["RACKCACHE_CEPH_POOL"],
                     rbd_name="no-such-image", block_size=4096, cluster_name="ceph")
        expect_error(ENOENT, "bdev_rbd_create", name="r2", pool_name=ceph["RACKCACHE_CEPH_POOL"],
                     rbd_name="vol1", block_size=4096, cluster_name="nope")
        expect_error(EBUSY, "bdev_rbd_unregister_cluster", name="ceph")

    # Inspection and unknown names.
    bdevs = call("bdev_get_bdevs")
    by_name = {b["name"]: b for b in bdevs}
    assert by_name["Malloc0"]["num_blocks"] == 2048 and by_name["Malloc0"]["block_size"] == 512
    assert by_name["aio0"]["product_name"] == "AIO disk"
    assert call("bdev_get_bdevs", name="m1")[0]["block_size"] == 4096
    expect_error(ENODEV, "bdev_get_bdevs", name="nope")
    stats = call("bdev_get_iostat")
    assert stats["tick_rate"] > 0 and {b["name"] for b in stats["bdevs"]} == set(by_name)
    expect_error(METHOD_NOT_FOUND, "bdev_frobnicate")
    # Each module deletes only its own kind.
    expect_error(ENODEV, "bdev_malloc_delete", name="aio0")
    expect_error(ENODEV, "bdev_aio_delete", name="nope")

    # A bdev created and deleted leaves no trace in the saved config.
    call("bdev_malloc_create", name="gone", num_blocks=64, block_size=512)
    assert call("bdev_malloc_delete", name="gone") is True
    assert "gone" not in names()

    for m in ("nvmf_create_transport", "nvmf_subsystem_add_ns", "nvmf_get_subsystems"):
        assert m in methods, methods
    nvmf_first_phase()

    # SPDK's client-side save_config walks framework_get_subsystems and
    # framework_get_config; the server-side save_config must agree with it.
    buf = io.StringIO()
    spdk_config.save_config(client, buf, indent=2)
    saved = json.loads(buf.getvalue())
    assert saved == call("save_config"), "client-side and server-side save_config differ"
    assert [s["subsystem"] for s in saved["subsystems"]] == ["keyring", "bdev", "nvmf"]
    methods_saved = [c["method"] for s in saved["subsystems"] for c in s["config"]]
    want = ["bdev_malloc_create", "bdev_malloc_create", "bdev_aio_create"]
    if ceph:
        want = ["bdev_rbd_register_cluster"] + want + ["bdev_rbd_create"]
    # SPDK's order: transport, subsystems, hosts, namespaces, listeners.
    want += ["nvmf_create_transport", "nvmf_create_subsystem", "nvmf_create_subsystem",
             "nvmf_subsystem_add_host", "nvmf_subsystem_add_ns", "nvmf_subsystem_add_ns"]
    if ceph:
        want += ["nvmf_subsystem_add_ns"]
    # Listeners last, the discovery subsystem's first.
    want += ["nvmf_subsystem_add_listener"] * 3
    listener_nqns = [c["params"]["nqn"] for s in saved["subsystems"] for c in s["config"]
                     if c["method"] == "nvmf_subsystem_add_listener"]
    assert listener_nqns == [DISCOVERY, CNODE1, CNODE2], listener_nqns
    assert methods_saved == want, methods_saved
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump(saved, f)
    with open(os.path.join(workdir, "bdevs.json"), "w") as f:
        json.dump(bdevs, f)
    print("first phase: ok,", len(bdevs), "bdevs")

elif phase == "restart":
    with open(os.path.join(workdir, "bdevs.json")) as f:
        before = json.load(f)
    after = call("bdev_get_bdevs")
    key = lambda b: (b["name"], b["product_name"], b["block_size"], b["num_blocks"], b["uuid"])
    assert sorted(map(key, after)) == sorted(map(key, before)), (before, after)
    nvmf_restart_phase()
    print("restart phase: ok,", len(after), "bdevs back with the same identities; nvmf state back")
else:
    raise SystemExit(f"unknown phase {phase}")
