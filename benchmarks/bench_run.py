"""`kernelwright bench` on the GPU machine, with provenance, in one call.

    PYTHONPATH=src python3 benchmarks/bench_run.py --out DIR --commit SHA \
        --solutions benchmarks/solutions/h200 --only NAME,NAME,... [--resume-from PARTIAL.json]

1. Warms inductor's cache with `kernelwright baseline`'s compile step, several problems at a time:
   the bench's own torch.compile baselines then load compiled graphs instead of building them one
   after another. Nothing is timed here; every time in the bench is measured inside its verdict.
2. Runs the bench itself (measured baselines, interleaved with the candidate), rewriting
   DIR/bench.json after every problem; with --resume-from, finished problems of an earlier partial
   file are taken back (same policy, problem and files).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def warm(entries, policy, jobs: int, out: Path, device: str) -> None:
    """Compile every problem's torch.compile baseline, `jobs` at a time, each in its own reference
    child (the code `kernelwright baseline` compiles with); the seconds go to DIR/warm.json."""
    from concurrent.futures import ThreadPoolExecutor

    from kernelwright.judge import baseline

    t0 = time.perf_counter()
    children = baseline._Children(device, policy)
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda e: baseline.compile_one(e.problem, device, policy, children), entries))
    finally:
        children.close()
    rows = [{"problem": e.problem.name, "compile_s": s, "error": err} for e, (s, err) in zip(entries, results)]
    (out / "warm.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0, "jobs": jobs, "compiles": rows}, indent=1) + "\n")
    print(f"warm-up: {len(rows)} compiles in {time.perf_counter() - t0:.1f} s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--suite", default="builtin")
    ap.add_argument("--solutions", nargs="+", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--budget-s", type=float, default=6.0, help="the judge's timing budget per verdict")
    ap.add_argument("--warm-jobs", type=int, default=12)
    ap.add_argument("--no-warm", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (the claim) or cpu (a dry run of this script)")
    ap.add_argument("--resume-from", type=Path, default=None)
    args = ap.parse_args()
    os.environ["KERNELWRIGHT_COMMIT"] = args.commit
    sys.path.insert(0, str(ROOT / "src"))
    from kernelwright.judge.policy import Policy, TimingConfig
    from kernelwright.report.bench import BenchConfig, run_bench, select_entries

    args.out.mkdir(parents=True, exist_ok=True)
    only = tuple(n for n in args.only.split(",") if n)
    policy = Policy(timing=TimingConfig(budget_s=args.budget_s))
    entries = select_entries(args.suite, only)
    if not args.no_warm:
        from kernelwright.report.solutions import find_solutions

        solved, _ = find_solutions(args.solutions, entries, None)
        warm([e for e in entries if e.problem.name in solved], policy, args.warm_jobs, args.out, args.device)
    bench_json = args.out / "bench.json"
    if args.resume_from:
        shutil.copyfile(args.resume_from, bench_json)
    config = BenchConfig(suite=args.suite, sources=tuple(args.solutions), only=only, device=args.device, store=args.out / "store.sqlite",
                         out=bench_json, resume=args.resume_from is not None)
    t0 = time.perf_counter()
    doc = run_bench(config, policy, on_start=lambda i, n, name: print(f"[bench {time.perf_counter() - t0:6.1f} s] {i + 1}/{n} {name}", flush=True),
                    warn=lambda m: print(f"warning: {m}", flush=True))
    doc["command"] = " ".join(sys.argv)
    doc["bench_wall_s"] = time.perf_counter() - t0
    bench_json.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    for r in doc["problems"]:
        v = r.get("verdict") or {}
        print(f"{r['name']:32s} {r['status']:14s} {v.get('runtime_ms')!s:>10} ms  vs best {v.get('speedup_vs_best')}", flush=True)
    print(json.dumps(doc["metrics"]["overall"], indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
