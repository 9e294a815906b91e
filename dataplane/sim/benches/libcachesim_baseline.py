"""libCacheSim's LRU on a trace: the simulator benchmark's baseline.

Usage: libcachesim_baseline.py TRACE CACHE_FRACTION

TRACE is a libCacheSim oracleGeneral binary (the CloudPhysics sample ships
one). Prints one JSON object: requests, seconds, requests/s, miss ratio.
The cache size is CACHE_FRACTION of the trace's working set in bytes
(distinct objects' sizes), the same rule rackcache-sim's "N%" uses.
"""

import json
import struct
import sys
import time

import libcachesim as lcs

path, fraction = sys.argv[1], float(sys.argv[2])

# oracleGeneral records: u32 timestamp, u64 object id, u32 size, i64 next
# access (24 bytes, little-endian). One pass for the working set.
RECORD = struct.Struct("<IQIq")
sizes = {}
requests = 0
with open(path, "rb") as f:
    data = f.read()
for _, obj, size, _ in RECORD.iter_unpack(data[: len(data) - len(data) % RECORD.size]):
    sizes[obj] = size
    requests += 1
working_set = sum(sizes.values())
cache_bytes = max(1, int(working_set * fraction))

reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
cache = lcs.LRU(cache_size=cache_bytes)
start = time.perf_counter()
result = cache.process_trace(reader)
elapsed = time.perf_counter() - start
miss_ratio = result[0] if isinstance(result, (tuple, list)) else result
print(json.dumps({
    "simulator": "libCacheSim LRU (Python package %s)" % getattr(lcs, "__version__", "0.3.5"),
    "requests": requests,
    "working_set_bytes": working_set,
    "cache_bytes": cache_bytes,
    "seconds": elapsed,
    "requests_per_second": requests / elapsed if elapsed > 0 else None,
    "miss_ratio": miss_ratio,
}))
