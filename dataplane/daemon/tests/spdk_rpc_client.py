"""Drives rackcache-dataplane with SPDK's own Python JSON-RPC client.

Usage: spdk_rpc_client.py SOCKET WORKDIR first|restart [CEPH_ENV_FILE]

`first` creates one object of every kind, checks that duplicates, unknown
names, bad parameters and unknown methods are refused with SPDK's error codes
and change nothing, and saves the configuration (with SPDK's client-side
save_config) to WORKDIR/config.json and the bdev list to WORKDIR/bdevs.json.
`restart` runs against a daemon started with --config WORKDIR/config.json and
checks that the same bdevs are back, with the same identities.
"""

import io
import json
import os
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


def expect_error(code, method, **params):
    before = call("bdev_get_bdevs")
    try:
        call(method, **params)
    except JSONRPCException as e:
        assert f'"code": {code}' in str(e), f"{method}: want code {code}, got:\n{e}"
    else:
        raise AssertionError(f"{method}({params}) succeeded; want error {code}")
    assert call("bdev_get_bdevs") == before, f"failed {method} changed the bdev list"


def names():
    return [b["name"] for b in call("bdev_get_bdevs")]


EINVAL, ENOENT, EEXIST, ENODEV, EBUSY = -22, -2, -17, -19, -16
INVALID_PARAMS, METHOD_NOT_FOUND = -32602, -32601

if phase == "first":
    v = call("spdk_get_version")
    assert v["fields"]["major"] == 26, v
    methods = call("rpc_get_methods")
    for m in ("bdev_malloc_create", "bdev_rbd_create", "save_config"):
        assert m in methods, methods

    # malloc: default and explicit names; refusals.
    assert call("bdev_malloc_create", num_blocks=2048, block_size=512) == "Malloc0"
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
                    block_size=4096, cluster_name="ceph") == "Ceph0"
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

    # SPDK's client-side save_config walks framework_get_subsystems and
    # framework_get_config; the server-side save_config must agree with it.
    buf = io.StringIO()
    spdk_config.save_config(client, buf, indent=2)
    saved = json.loads(buf.getvalue())
    assert saved == call("save_config"), "client-side and server-side save_config differ"
    methods_saved = [c["method"] for s in saved["subsystems"] for c in s["config"]]
    want = ["bdev_malloc_create", "bdev_malloc_create", "bdev_aio_create"]
    if ceph:
        want = ["bdev_rbd_register_cluster"] + want + ["bdev_rbd_create"]
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
    print("restart phase: ok,", len(after), "bdevs back with the same identities")
else:
    raise SystemExit(f"unknown phase {phase}")
