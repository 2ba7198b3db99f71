"""Can an honest kernel beat the physics_floor guard's write floor? (GPU only)

The guard refuses a time under the write floor: the output's bytes at the vendor's peak memory
bandwidth (judge/roofline.py; 4.8 TB/s on the H200, never less on any GPU; the GPU's own peak is
recorded beside it). The judge's flush reads a buffer twice the L2's size, so L2 holds clean lines
when the timed call starts, and an output that fits in L2 may be written at
L2 speed, with the write-back to memory after the end event. Where that is faster than the peak,
the guard would refuse an honest kernel whose output is mostly written and little read.

This times three such kernels with the judge's own timing function (flush, events, device-wide
sync, lead), over output sizes from 1 MiB to 512 MiB of float32:
- `zero`: `out.zero_()`, writes only;
- `fill`: `out.fill_(1.5)`, writes only;
- `expand`: `out.copy_(row.expand_as(out))`, a 4 KiB row read, the whole output written.
Each row gives the median stream time, the price the guard compares (that median less the median
of an empty call under the same switches, as judge.pricing.median_price takes it), the write floor
at the peak the judge uses, and their ratio (under 1: the guard would refuse that honest kernel),
with the GPU's own name, its L2 size and the lead spin in force.

    PYTHONPATH=src python3 benchmarks/write_floor_bench.py --out DIR --commit C [--calls 30]

Writes DIR/write_floor_bench.json. Not a test: it says whether the floor's premise holds on the
machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES_MIB = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512)
COLS = 1024  # float32 columns of the output: a 4 KiB row


def floor_rows(times: dict[str, dict[int, list[float]]], overhead_ms: float, peak_bytes_per_s: float,
               own_bytes_per_s: float | None = None) -> list[dict]:
    """One row per kernel and size: the median time, the price (the median less `overhead_ms`, the
    empty call's median, never under pricing.MIN_MS), the write floor and the price over the floor;
    with `own_bytes_per_s` (the GPU's own datasheet peak), the price over the floor at that too.
    `times` is {kernel: {size in MiB: [ms...]}}."""
    from kernelwright.judge.pricing import median_price

    rows = []
    for kernel, by_size in times.items():
        for mib, ms in sorted(by_size.items()):
            floor_ms = (mib << 20) / peak_bytes_per_s * 1e3
            price = median_price(ms, overhead_ms)
            rows.append({"kernel": kernel, "mib": mib, "median_ms": round(statistics.median(ms), 6), "price_ms": round(price, 6),
                         "write_floor_ms": round(floor_ms, 6), "price_over_floor": round(price / floor_ms, 4),
                         "price_tb_per_s": round((mib << 20) / (price * 1e-3) / 1e12, 3)})
            if own_bytes_per_s:
                rows[-1]["price_over_own_floor"] = round(price / ((mib << 20) / own_bytes_per_s * 1e3), 4)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default="unknown", help="the commit being measured (recorded in the file's provenance)")
    ap.add_argument("--calls", type=int, default=30, help="timed calls per kernel and size")
    a = ap.parse_args()
    if a.calls < 1:
        ap.error("--calls must be positive")
    import torch

    if not torch.cuda.is_available():
        print("write_floor_bench needs a CUDA device", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from judge_bench import provenance
    from kernelwright.judge import roofline, timing
    from kernelwright.judge.guards.physics_floor import write_bandwidth
    from kernelwright.judge.policy import TimingConfig

    dev = torch.device("cuda")
    sw = timing.switches_from({"flush": True, "events": True, "sync": True, "lead_us": TimingConfig().lead_us}, cuda=True)
    if not sw.lead_us:
        print("warning: the lead spin did not load (nvcc?): times include the host's launch latency, unlike a verdict's", file=sys.stderr)
    props = torch.cuda.get_device_properties(dev)
    peaks = roofline.peaks_for(props.name)
    peak = write_bandwidth(peaks)  # the bandwidth the guard's write floor takes on this GPU
    row = torch.randn(COLS, device=dev)
    kernels = {
        "zero": lambda out: out.zero_(),
        "fill": lambda out: out.fill_(1.5),
        "expand": lambda out: out.copy_(row.expand_as(out)),
    }
    a.out.mkdir(parents=True, exist_ok=True)
    switches = {"flush": True, "events": True, "sync": True, "lead_us": TimingConfig().lead_us}
    timing.time_null(3, cuda=True, switches=switches)  # warm
    null = timing.time_null(max(a.calls, 20), cuda=True, switches=switches)
    overhead = statistics.median(null)
    doc = {"provenance": provenance(a.commit), "gpu_name": props.name, "l2_bytes": timing.l2_bytes(), "lead_us": sw.lead_us,
           "null_median_ms": overhead, "write_floor_bytes_per_s": peak,
           "gpu_peak_bytes_per_s": peaks.bytes_per_s if peaks.known else None, "calls": a.calls, "rows": []}
    times: dict[str, dict[int, list[float]]] = {k: {} for k in kernels}
    t0 = time.perf_counter()
    with torch.no_grad():
        for mib in SIZES_MIB:
            args = [torch.empty((mib << 20) // 4 // COLS, COLS, device=dev)]
            for name, fn in kernels.items():
                timing.time_calls(fn, lambda _i: args, 3, cuda=True, switches=sw)  # warm
                times[name][mib] = timing.time_calls(fn, lambda _i: args, a.calls, cuda=True, switches=sw)
            args.clear()
            torch.cuda.empty_cache()
    doc["rows"] = floor_rows(times, overhead, peak, peaks.bytes_per_s if peaks.known else None)
    (a.out / "write_floor_bench.json").write_text(json.dumps(doc, indent=1))
    print(f"{props.name}, L2 {timing.l2_bytes() >> 20} MiB, lead {sw.lead_us:g} us, empty call {overhead * 1e3:.2f} us, "
          f"write floor at {peak / 1e12:g} TB/s; {time.perf_counter() - t0:.1f} s")
    print(f"{'kernel':8} {'MiB':>5} {'median ms':>10} {'price ms':>10} {'floor ms':>10} {'price/floor':>11} {'TB/s':>6}")
    for r in doc["rows"]:
        print(f"{r['kernel']:8} {r['mib']:>5} {r['median_ms']:>10.5f} {r['price_ms']:>10.5f} {r['write_floor_ms']:>10.5f} "
              f"{r['price_over_floor']:>11.3f} {r['price_tb_per_s']:>6.2f}")
    under = [r for r in doc["rows"] if r["price_over_floor"] < 1]
    print(f"{len(under)} of {len(doc['rows'])} rows priced under the write floor (the guard would refuse them)" + (
        ": " + ", ".join(f"{r['kernel']} {r['mib']} MiB" for r in under) if under else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
