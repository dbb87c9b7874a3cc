"""The memory Arrow's allocator frees goes back to the system: a process that imports the pipeline does not keep
what a big run's batches held (mimalloc kept it, and it counted in every later step's peak)."""

from __future__ import annotations

import subprocess
import sys

HELD_AND_FREED = """
import pipeline
import numpy as np, pyarrow as pa, pyarrow.compute as pc

def rss_mb():
    return int(open('/proc/self/statm').read().split()[1]) * 4096 // 2**20

base = pa.array(np.arange(2**20, dtype=np.int64))
before = rss_mb()
held = [pc.add(base, i) for i in range(40)]  # 320 MB from Arrow's pool
assert pa.total_allocated_bytes() >= 320 * 2**20
peak = rss_mb()
del held
print(before, peak, rss_mb())
"""


def test_memory_arrow_frees_leaves_the_process():
    out = subprocess.run([sys.executable, "-c", HELD_AND_FREED], check=True, capture_output=True, text=True)
    before, peak, after = map(int, out.stdout.split())
    assert peak - before >= 300
    assert after - before < 60, (before, peak, after)
