"""Issue 30's figures: a bench of honest candidates judged by a pool of N workers (one GPU each)
against the same bench on one worker, and a worker killed mid-bench.

    PYTHONPATH=src:benchmarks python3 benchmarks/pool_scale_bench.py --out DIR [--device cuda] [--backend ray]
        [--workers 2] [--rounds 2] [--parts scale,kill] [--resume] [--commit SHA]
    PYTHONPATH=src:benchmarks python3 benchmarks/pool_scale_bench.py --out /tmp/psb --device cpu --workers 2 --rounds 1   # a dry run

The suite (DIR/suite, written at the start): on CUDA the 5 examples of examples/cuda and the 13
built-in problems with a shipped solution in benchmarks/solutions/h200 (18 problems); on the CPU
the examples of examples/cpu. No LLM wrote these candidates.

Parts, in this order:
- scale: each round benches the suite once on a pool of one worker and once on a pool of N, the
  order rotating by round. Each bench has a pool of its own (started, timed apart, closed), and
  its first pass over the suite is a warm-up (the worker's fork server, its reference children, the
  candidates' first builds), not compared. Figures: verdicts per minute of the timed pass; each
  candidate's time on N workers over its time on one (median over rounds); the statuses. Issue
  30's limits: at least 1.8x the verdicts per minute of one GPU (for N = 2), every time within 2 %.
- kill: one bench on N workers, with its store, where the last worker is killed (as a kernel that
  takes its device down would) once a third of the requests went out and it judges one. Checks:
  the bench is complete, every row has the status it had in the scale part (or, without it,
  `correct`), one verdict stored per row and none twice, the pool replaced one worker and sent
  the lost request again (its verdict's log says so).

Policy: the default with baselines skipped (--baselines to change it), so that a time is the
candidate's. DIR/pool_scale.json is rewritten after every bench, with provenance; --resume goes on
from it, skipping the benches it holds (a device call may end between two).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import hostinfo  # beside this file: on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "benchmarks" / "solutions" / "h200"
LIMITS = {"throughput_ratio": 1.8, "time_distance": 0.02}


def write_suite(device: str, dest: Path) -> list[str]:
    """DIR/<name>/problem.py with its candidate beside it (model_new.py and its files); the names."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in sorted((ROOT / "examples" / device).iterdir()):
        if (d / "problem.py").is_file() and (d / "model_new.py").is_file():
            shutil.copytree(d, dest / d.name, ignore=skip)
    if device == "cuda":
        from kernelwright.problems.suite import builtin_problem

        for sol in sorted(SOLUTIONS.glob("*.py")):
            (dest / sol.stem).mkdir()
            shutil.copyfile(builtin_problem(sol.stem).problem.path, dest / sol.stem / "problem.py")
            shutil.copyfile(sol, dest / sol.stem / "model_new.py")
    return sorted(p.name for p in dest.iterdir() if (p / "problem.py").is_file())


def rows_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: {"status": r["status"], "runtime_ms": (r.get("verdict") or {}).get("runtime_ms"), "verdict_id": r.get("verdict_id"),
                        "log_tail": ((r.get("verdict") or {}).get("log") or "")[-400:]} for r in doc["problems"]}


def one_bench(suite: Path, device: str, policy: Any, pool: Any, store: Path | None = None) -> dict[str, Any]:
    from kernelwright.report.bench import BenchConfig, run_bench

    t0 = time.perf_counter()
    doc = run_bench(BenchConfig(suite=str(suite), sources=(), device=device, store=store, keep=store is not None, pool=pool), policy)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "verdicts_per_min": 60 * len(doc["problems"]) / wall, "complete": doc.get("complete"), "rows": rows_of(doc)}


def scale_summary(rounds: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Per candidate the median over rounds of (time on n workers / time on one); the median over
    rounds of the throughput ratio; whether the statuses agree; against issue 30's limits."""
    ratios: dict[str, list[float]] = {}
    same = True
    throughput = []
    for r in rounds:
        one, many = r["benches"]["1"], r["benches"][str(n)]
        throughput.append(many["verdicts_per_min"] / one["verdicts_per_min"])
        for name, row in one["rows"].items():
            other = many["rows"].get(name) or {}
            same = same and row["status"] == other.get("status")
            if row["runtime_ms"] and other.get("runtime_ms"):
                ratios.setdefault(name, []).append(other["runtime_ms"] / row["runtime_ms"])
    med = {k: statistics.median(v) for k, v in ratios.items()}
    worst = max((abs(v - 1) for v in med.values()), default=None)
    tp = statistics.median(throughput) if throughput else None
    return {"rounds": len(rounds), "same_statuses": same, "time_ratio_median": med, "worst_time_distance": worst,
            "throughput_ratio_median": tp, "throughput_ratios": throughput, "timed": len(med),
            "within_limits": bool(same and worst is not None and worst <= LIMITS["time_distance"] and tp is not None
                                  and (n == 1 or tp >= LIMITS["throughput_ratio"]))}


def store_count(store: Path) -> int:
    db = sqlite3.connect(store)
    try:
        return int(db.execute("select count(*) from verdicts").fetchone()[0])
    finally:
        db.close()


def kill_check(bench: dict[str, Any], want: dict[str, str], stored: int, replaced: int, retried: int) -> dict[str, Any]:
    ids = [r["verdict_id"] for r in bench["rows"].values()]
    again = sorted(n for n, r in bench["rows"].items() if "[pool] judged again after" in r["log_tail"])
    statuses = {n: r["status"] for n, r in bench["rows"].items()}
    checks = {"complete": bool(bench["complete"]), "statuses_as_before": statuses == want,
              "one_verdict_per_row": all(ids) and len(set(ids)) == len(ids) and stored == len(ids),
              "replaced_one": replaced >= 1, "sent_again": retried >= 1 and bool(again)}
    return {"checks": checks, "ok": all(checks.values()), "judged_again": again, "stored": stored, "rows": len(ids),
            "replaced": replaced, "retried": retried}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--backend", default="ray", choices=("ray", "local"))
    ap.add_argument("--address", default=None, help="a Ray cluster to join (default: a Ray of the bench's own)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parts", default="scale,kill")
    ap.add_argument("--baselines", default="skip")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--commit", default=None)
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.split(",") if p]
    if a.workers < 1 or a.rounds < 1 or not parts or not set(parts) <= {"scale", "kill"}:
        ap.error("--workers and --rounds at least 1; --parts among scale, kill")
    if a.backend == "local" and a.address:
        ap.error("--address is a Ray cluster's: it needs --backend ray")
    import torch

    from kernelwright.client.pool import Pool
    from kernelwright.judge.policy import Policy

    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "pool_scale.json"
    if a.resume and path.is_file():
        doc = json.loads(path.read_text())
        if (doc["config"]["workers"], doc["config"]["device"], doc["config"]["backend"]) != (a.workers, a.device, a.backend):
            ap.error(f"{path} holds another configuration: {doc['config']}")
    else:
        doc = {"config": {"workers": a.workers, "device": a.device, "backend": a.backend, "baselines": a.baselines},
               "limits": LIMITS, "calls": [], "scale": [], "kill": None}
    try:
        import ray
        ray_version = ray.__version__
    except ImportError:
        ray_version = None
    doc["calls"].append({"commit": hostinfo.commit(a.commit or os.environ.get("KERNELWRIGHT_COMMIT", "unknown")), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         "torch": torch.__version__, "ray": ray_version, "python": platform.python_version(),
                         "host_cpu": hostinfo.cpu_model(), "command": " ".join(sys.argv)})
    suite = a.out / "suite"
    names = write_suite(a.device, suite)
    doc["problems"] = names
    policy = Policy(baselines=a.baselines)
    save = lambda: path.write_text(json.dumps(doc, indent=1))  # noqa: E731
    print(f"{len(names)} problems; workers {a.workers} ({a.backend}, {a.device}); parts {','.join(parts)}", flush=True)

    def bench_on(w: int, store: Path | None = None, killer: Any = None) -> dict[str, Any]:
        t0 = time.perf_counter()
        with Pool(a.backend, workers=w, device=a.device, address=a.address) as pool:
            got: dict[str, Any] = {"workers": w, "start_s": time.perf_counter() - t0, "gpus": pool.gpus()}
            if killer is None:
                got["warmup"] = {k: v for k, v in one_bench(suite, a.device, policy, pool).items() if k != "rows"}
                print(f"  {w} worker(s): warm-up {got['warmup']['wall_s']:.1f} s", flush=True)
            else:
                threading.Thread(target=killer, args=(pool,), daemon=True).start()
            got.update(one_bench(suite, a.device, policy, pool, store))
            got.update(replaced=pool.replaced, retried=pool.retried, sent=pool.sent)
        print(f"  {w} worker(s): {got['wall_s']:.1f} s, {got['verdicts_per_min']:.1f} verdicts/min, "
              f"{sorted({r['status'] for r in got['rows'].values()})}", flush=True)
        return got

    status = 0
    if "scale" in parts:
        for k in range(len(doc["scale"]), a.rounds):
            modes = ["1", str(a.workers)] if a.workers > 1 else ["1"]
            order = modes[k % len(modes):] + modes[:k % len(modes)]
            print(f"round {k + 1}: {' then '.join(order)} worker(s)", flush=True)
            rnd: dict[str, Any] = {"order": order, "benches": {}}
            for m in order:
                rnd["benches"][m] = bench_on(int(m))
            doc["scale"].append(rnd)
            doc["scale_summary"] = scale_summary(doc["scale"], a.workers)
            save()
        if doc["scale"]:
            s = doc["scale_summary"]
            print(f"scale: throughput x{s['throughput_ratio_median']:.2f}, worst time distance {s['worst_time_distance']}, "
                  f"statuses same {s['same_statuses']}, within limits {s['within_limits']}", flush=True)
            status |= not s["within_limits"]
    if "kill" in parts and doc["kill"] is None:
        victim = a.workers - 1
        store = a.out / "kill_store.sqlite"
        store.unlink(missing_ok=True)
        killed: dict[str, Any] = {}

        def killer(pool: Any) -> None:
            deadline = time.monotonic() + 1800
            while time.monotonic() < deadline:
                if pool.sent >= max(2, len(names) // 3) and victim in pool.in_flight:
                    killed.update(worker=victim, after_sent=pool.sent, at=time.strftime("%H:%M:%SZ", time.gmtime()))
                    pool.kill(victim)
                    return
                time.sleep(0.05)

        print(f"kill: worker {victim} of {a.workers} killed mid-bench", flush=True)
        got = bench_on(a.workers, store, killer)
        before = doc["scale"][-1]["benches"][str(a.workers)]["rows"] if doc["scale"] else None
        want = {n: r["status"] for n, r in before.items()} if before else {n: "correct" for n in got["rows"]}
        doc["kill"] = {"killed": killed, "bench": got,
                       **kill_check(got, want, store_count(store), got["replaced"], got["retried"])}
        save()
        print(f"kill: {json.dumps(doc['kill']['checks'])}; judged again: {doc['kill']['judged_again']}", flush=True)
        status |= not doc["kill"]["ok"]
    elif "kill" in parts:
        status |= not doc["kill"]["ok"]
    save()
    return status


if __name__ == "__main__":
    sys.exit(main())
