"""`kernelwright bench` on the GPU machine, with provenance, in one call.

    PYTHONPATH=src python3 benchmarks/bench_run.py --out DIR --commit SHA \
        --solutions benchmarks/solutions/h200 --only NAME,NAME,... [--resume-from PARTIAL.json]

1. Warms inductor's cache with `kernelwright baseline`'s code (compiles in parallel, then times each
   problem once): the bench's own torch.compile baselines then load compiled graphs instead of
   building them one after another. Those baseline times are kept too (DIR/baselines.json), as a
   cross-check of the times measured inside each verdict.
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


def warm(entries, policy, jobs: int, out: Path) -> None:
    """Compile every problem's torch.compile baseline in parallel and time eager and compile once."""
    from kernelwright.judge import baseline
    from kernelwright.store import Store

    t0 = time.perf_counter()
    with Store.open(out / "warm_store.sqlite") as db:
        for e in entries:
            db.put_problem(e.problem.hash, e.problem.name, str(e.problem.path), e.problem.source)
        records = baseline.run([e.problem for e in entries], device="cuda", policy=policy, jobs=jobs, store=db, refresh=True,
                               on_event=lambda kind, p, v: print(f"[warm {time.perf_counter() - t0:6.1f} s] {kind} {p.name}", flush=True)
                               if kind in ("compiled", "timed") else None)
    rows = [r.to_dict() for r in records]
    (out / "baselines.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0, "records": rows}, indent=1, default=str) + "\n")
    (out / "warm_store.sqlite").unlink(missing_ok=True)
    print(f"warm-up done in {time.perf_counter() - t0:.1f} s", flush=True)


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
        warm([e for e in entries if e.problem.name in solved], policy, args.warm_jobs, args.out)
    bench_json = args.out / "bench.json"
    if args.resume_from:
        shutil.copyfile(args.resume_from, bench_json)
    config = BenchConfig(suite=args.suite, sources=tuple(args.solutions), only=only, device="cuda", store=args.out / "store.sqlite",
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
