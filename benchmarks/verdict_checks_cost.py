"""What the cache's lock re-checks and the floor's GPU lookup cost a verdict (CPU only, no GPU work):
per call, the median of 2000 calls in one process, of `cache_prune.in_use` and its close (a raw
build's use lock, with the check that the locked file is still the one at its path),
`cache_prune.same_file` alone, `extension.hold_triton_cache` and its close, `roofline.peaks_for`
and `physics_floor.floor_and_efficiency`.

    PYTHONPATH=src python3 benchmarks/verdict_checks_cost.py --commit C
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path


def median_us(fn, n: int = 2000) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commit", default="unknown", help="the commit being measured (printed with the figures)")
    a = ap.parse_args()
    os.environ["KERNELWRIGHT_CACHE"] = tempfile.mkdtemp(prefix="kw-cost-")
    from kernelwright.judge import cache_prune, extension, roofline
    from kernelwright.judge.guards.physics_floor import floor_and_efficiency

    lock = Path(os.environ["KERNELWRIGHT_CACHE"]) / "builds" / ".locks" / "k.use"
    rows = {"in_use + close": median_us(lambda: os.close(cache_prune.in_use(lock)))}
    fd = os.open(lock, os.O_RDONLY)
    rows["same_file"] = median_us(lambda: cache_prune.same_file(fd, lock))
    os.close(fd)
    rows["hold_triton_cache + close"] = median_us(lambda: os.close(extension.hold_triton_cache("ab" * 8)))
    gpu = "NVIDIA H100 80GB HBM3"
    meta = {"bytes": 1 << 28, "flops": 1 << 20, "output_bytes": [1 << 27], "outputs": [{"dtype": "float32"}], "gpu": gpu}
    rows["peaks_for"] = median_us(lambda: roofline.peaks_for(gpu))
    rows["floor_and_efficiency"] = median_us(lambda: floor_and_efficiency(meta, 1.0, "fp32"))
    print(f"commit {a.commit}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    for name, us in rows.items():
        print(f"{name:28} {us:8.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
