"""GPU memory the judge owns, on the GPU machine: the largest KernelBench level 1 problem judged,
eight concurrent verdicts of a multi-GiB problem admitted by memory, and a problem too large for
the device refused as a problem error.

    PYTHONPATH=src python3 benchmarks/memory_bench.py --out DIR --commit C --kernelbench KB_LEVEL1_DIR

KB_LEVEL1_DIR is KernelBench's `KernelBench/level1` folder from a checkout of the public repository
(none of its files are in this repository). Sections: kb45 (level 1 problem 45, 2D average pooling
of a 16 GiB input, the largest input of level 1 (benchmarks/memory/avgpool2d_candidate): baselines
cached first, then one full verdict; then the same problem with baselines measured in the verdict:
a problem error while the estimate put it past the device (162.37 GiB, up to 57dc79d), judged since
the timing pool of inputs this large holds one set instead of three (judge.memory.pool_slots; about
83 GiB estimated)), concurrent8 (eight verdicts at once of
benchmarks/memory/relu_2g.py, 2 GiB in and out, with the fixture candidate relu_cuda, baselines
cached). Every verdict records the peak memory of all processes on the GPU while it ran (nvidia-smi
every 50 ms) and its `memory` field. Writes DIR/memory_bench.json and DIR/memory_bench.log.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from warm_bench import GpuMemory, provenance, run_sections  # noqa: E402


def log_line(a: argparse.Namespace, text: str) -> None:
    with open(a.out / "memory_bench.log", "a") as f:
        f.write(text.rstrip() + "\n")
    print(text, file=sys.stderr, flush=True)


def baseline(a: argparse.Namespace, problem: Path) -> None:
    cmd = [sys.executable, "-m", "kernelwright", "baseline", "--suite", str(problem), "--device", "cuda", "--store", str(a.store), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    log_line(a, f"$ {' '.join(cmd)} [{time.perf_counter() - t0:.1f} s rc={proc.returncode}]\n{proc.stderr[-1500:]}")


def judge(a: argparse.Namespace, problem: Path, candidate: Path, **policy: Any) -> dict[str, Any]:
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.policy import Policy
    from kernelwright.problems.loader import ProblemError

    t0, m0 = time.perf_counter(), time.monotonic()
    try:
        v = evaluate(problem, candidate, Policy(**policy), device="cuda", baseline_store=a.store).to_dict()
    except ProblemError as exc:
        return {"problem_error": str(exc), "wall_s": time.perf_counter() - t0}
    peak = a.mem.peak(m0, time.monotonic())
    return {"status": v["status"], "wall_s": time.perf_counter() - t0, "runtime_ms": v["runtime_ms"], "eager_ms": v["eager_ms"],
            "memory": v.get("memory"), "workers": v.get("workers"), "gpu_peak_mib": peak, "log": (v.get("log") or "")[:1500]}


def sec_kb45(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    problem = a.kernelbench / "45_Average_Pooling_2D.py"
    cand = ROOT / "benchmarks" / "memory" / "avgpool2d_candidate"
    baseline(a, problem)
    row = judge(a, problem, cand, baselines="cached", compile_baseline=True)
    log_line(a, f"kb45 cached baselines: {json.dumps({k: v for k, v in row.items() if k != 'log'})}")
    measured = judge(a, problem, cand, baselines="measured", compile_baseline=False)
    log_line(a, f"kb45 baselines measured in the verdict: {json.dumps({k: v for k, v in measured.items() if k != 'log'})}")
    doc["kb45"] = {"verdict": row, "measured_baselines": measured}


def sec_concurrent8(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    problem = ROOT / "benchmarks" / "memory" / "relu_2g.py"
    cand = ROOT / "tests" / "fixtures" / "candidates" / "relu_cuda"
    baseline(a, problem)
    judge(a, problem, cand, baselines="cached")  # the candidate's build cached, as in the other verdicts
    t0, m0 = time.perf_counter(), time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        rows = list(pool.map(lambda _i: judge(a, problem, cand, baselines="cached"), range(8)))
    wall = time.perf_counter() - t0
    statuses = [r.get("status") or "problem_error" for r in rows]
    log_line(a, f"concurrent8: {statuses} in {wall:.1f} s; peak of all processes {a.mem.peak(m0, time.monotonic())} MiB; "
                f"admission waits {[r.get('memory', {}) and r['memory'].get('admitted_after_s') for r in rows]}")
    doc["concurrent8"] = {"wall_s": wall, "statuses": statuses, "peak_mib": a.mem.peak(m0, time.monotonic()), "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--kernelbench", type=Path, required=True, help="KernelBench's KernelBench/level1 folder")
    p.add_argument("--sections", default="kb45,concurrent8")
    a = p.parse_args()
    a.device = "cuda"
    a.out.mkdir(parents=True, exist_ok=True)
    a.work = Path(tempfile.mkdtemp(prefix="kw-memory-bench-"))  # store and build cache: DIR keeps only what should come back
    a.store = a.work / "memory_store.sqlite"
    os.environ.setdefault("KERNELWRIGHT_CACHE", str(a.work / "cache"))
    a.mem = GpuMemory("cuda")
    doc: dict[str, Any] = {"provenance": provenance(a)}
    run_sections(a, doc, globals(), a.out / "memory_bench.json", log_line)
    a.mem.stop()
    print(json.dumps({"errors": doc.get("errors")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
