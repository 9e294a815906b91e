"""libCacheSim's eviction policies on a 4 KiB block stream, for
`rackcache-sim --compare-peers` (which embeds this file, writes it next to
the stream and runs it with the venv's Python; see docs/simulator.md).

Usage: peers.py --check
       peers.py STREAM WARMUP CACHE_BYTES...

STREAM is an oracleGeneral file with one 4096-byte object per 4 KiB block
access. For each cache size in bytes and each policy (in parallel, one
process per core), a fresh cache replays the first WARMUP records
uncounted, then the rest counted (libCacheSim keeps the cache's state
between two process_trace calls). Prints one JSON object:
{"libcachesim": version, "results": [{"policy", "cache_bytes",
"miss_ratio"}, ...]}. --check only imports libcachesim and prints the
version, so that a missing package is reported before the long replays.
"""

import json
import multiprocessing
import os
import sys

try:
    import libcachesim as lcs
except ImportError as e:
    # rackcache-sim turns this status into "run hack/deps.sh python".
    print("cannot import libcachesim: %s" % e, file=sys.stderr)
    sys.exit(3)

# The package's class names; each runs with its default parameters (the
# hash table size aside, see below).
POLICIES = ["LRU", "ARC", "S3FIFO", "WTinyLFU", "LIRS", "Sieve"]


def miss_ratio(job):
    """One policy at one size, in a worker process of its own."""
    policy, cache_bytes, path, warmup = job
    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    # The hash table grows as needed, so its initial size only changes the
    # speed: the package's default (2^24 buckets, 128 MiB) made a run on the
    # CloudPhysics sample three times slower than one sized to the cache.
    hashpower = min(24, max(16, (cache_bytes // 4096).bit_length()))
    cache = getattr(lcs, policy)(cache_size=cache_bytes, hashpower=hashpower)
    if warmup > 0:
        cache.process_trace(reader, 0, warmup)
        # All objects are 4096 bytes: the object and byte miss ratios agree.
        return cache.process_trace(reader, warmup)[0]
    return cache.process_trace(reader)[0]


def main(argv):
    version = getattr(lcs, "__version__", "unknown")
    if argv[1:] == ["--check"]:
        print(json.dumps({"libcachesim": version}))
        return 0
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    path, warmup = argv[1], int(argv[2])
    jobs = [(policy, int(size), path, warmup) for size in argv[3:] for policy in POLICIES]
    # Every run is independent and single-threaded: one process per core.
    with multiprocessing.Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        ratios = pool.map(miss_ratio, jobs)
    results = [
        {"policy": policy, "cache_bytes": size, "miss_ratio": ratio}
        for (policy, size, _, _), ratio in zip(jobs, ratios)
    ]
    print(json.dumps({"libcachesim": version, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
