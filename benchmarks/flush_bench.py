"""What the L2 flush's old int64 copy did to timed calls (GPU only).

Up to a72c13a, timing.flush_l2 summed its int32 buffer with a plain `sum`, which accumulates in
int64; ATen first cast the whole buffer, so every flush also wrote a 240 MiB copy (on the H200)
whose lines were dirty in L2 when the timed call began, and each timing child held the copy's
block (benchmarks/results/memory_h200.md). This times the shipped examples' candidates and eager
references with the judge's own timing function, in one process, under the two flushes in
alternating blocks of calls: `int32` (the flush as it is, a read) and `int64` (the old one,
the read plus the copy). It records each one's median stream time and device-wide time, their
ratio, and what each flush allocated beyond the buffer.

    PYTHONPATH=src python3 benchmarks/flush_bench.py --out DIR --commit C [--blocks 10] [--calls 20]

Writes DIR/flush_bench.json. Not a test: the numbers say how far results timed before the change
(stored baselines, recorded verdicts) sit from ones timed after it, for the same kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "cuda"
EXAMPLES = ("softmax", "layernorm", "elementwise_chain", "matmul")


def ratio_rows(times: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Per contender: the median stream time under each flush and the old one's over the new one's.
    `times` is {contender: {"int32": [ms...], "int64": [ms...]}}."""
    out = {}
    for name, by in times.items():
        new, old = statistics.median(by["int32"]), statistics.median(by["int64"])
        out[name] = {"int32_ms": round(new, 5), "int64_ms": round(old, 5), "old_over_new": round(old / new, 5) if new > 0 else None}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default="unknown", help="the commit being measured (recorded in the file's provenance)")
    ap.add_argument("--blocks", type=int, default=10, help="alternating blocks per flush and contender")
    ap.add_argument("--calls", type=int, default=20, help="timed calls per block")
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    a = ap.parse_args()
    if a.blocks < 1 or a.calls < 1:
        ap.error("--blocks and --calls must be positive")
    import torch

    if not torch.cuda.is_available():
        print("flush_bench needs a CUDA device", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from judge_bench import provenance
    from kernelwright.judge import inputs, timing
    from kernelwright.judge.inputs import Case
    from kernelwright.judge.policy import TimingConfig

    dev = torch.device("cuda")
    sw = timing.switches_from({"flush": True, "events": True, "sync": True, "lead_us": TimingConfig().lead_us}, cuda=True)
    new_flush = timing.flush_l2

    new_flush()  # the buffer both flushes read

    def old_flush() -> None:  # the flush up to a72c13a: the same buffer, a plain sum (an int64 copy first)
        torch.Tensor.sum(timing._FLUSH["buf"])

    flushes = {"int32": new_flush, "int64": old_flush}
    allocated = {}
    for label, fn in flushes.items():  # what each flush allocates beyond its buffer
        fn()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        allocated[label] = (torch.cuda.max_memory_allocated() - base) >> 20
    a.out.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": provenance(a.commit), "blocks": a.blocks, "calls": a.calls, "flush_extra_allocated_mib": allocated, "examples": {}}
    t0 = time.perf_counter()
    for name in [x for x in a.examples.split(",") if x]:
        problem = inputs.import_file(EX / name / "problem.py", f"kw_problem_{name}")
        cand = inputs.import_file(EX / name / "model_new.py", f"kw_candidate_{name}")
        values = inputs.raw_inputs(problem, Case("native", 1), dev)
        fns = {"candidate": inputs.init_model(problem, cand.ModelNew, 1, dev), "eager": inputs.init_model(problem, problem.Model, 1, dev)}
        stream: dict[str, dict[str, list[float]]] = {c: {"int32": [], "int64": []} for c in fns}
        synced: dict[str, dict[str, list[float]]] = {c: {"int32": [], "int64": []} for c in fns}
        with torch.no_grad():
            for fn in fns.values():  # warm: every path taken once under both flushes
                for label, flush in flushes.items():
                    timing.flush_l2 = flush
                    timing.time_calls(fn, lambda _i: values, 3, cuda=True, switches=sw)
            for block in range(a.blocks):
                for contender, fn in fns.items():
                    order = ("int32", "int64") if block % 2 == 0 else ("int64", "int32")  # neither flush always goes first
                    for label in order:
                        timing.flush_l2 = flushes[label]
                        got: list[float] = []
                        stream[contender][label] += timing.time_calls(fn, lambda _i: values, a.calls, cuda=True, switches=sw, synced=got)
                        synced[contender][label] += got
        timing.flush_l2 = new_flush
        doc["examples"][name] = {"stream": ratio_rows(stream), "device_wide": ratio_rows(synced)}
        print(f"{name}: " + "; ".join(f"{c} {r['int32_ms']} ms (int32 flush) against {r['int64_ms']} ms (int64 copy), {r['old_over_new']}x"
                                      for c, r in doc["examples"][name]["stream"].items()), flush=True)
        (a.out / "flush_bench.json").write_text(json.dumps(doc, indent=1))
    print(f"flush extra allocation (MiB): {allocated}; {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
