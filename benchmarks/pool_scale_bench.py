"""Issue 30's figures: a bench of honest candidates judged by a pool of N workers (one GPU each)
against the same bench on one worker, and a worker killed mid-bench.

    PYTHONPATH=src:benchmarks python3 benchmarks/pool_scale_bench.py --out DIR [--device cuda] [--backend ray]
        [--workers 2] [--rounds 2] [--parts scale,kill] [--resume] [--commit SHA]
    PYTHONPATH=src:benchmarks python3 benchmarks/pool_scale_bench.py --out /tmp/psb --device cpu --backend local --workers 2 --rounds 1   # a dry run

The suite (DIR/suite, written at the start): on CUDA the 5 examples of examples/cuda and the 13
built-in problems with a shipped solution in benchmarks/solutions/h200 (18 problems); on the CPU
the examples of examples/cpu. No LLM wrote these candidates.

Parts, in this order:
- scale (N at least 2): each round benches the suite once on a pool of one worker and once on a
  pool of N, the order rotating by round. Each bench has a pool of its own (started, timed apart,
  closed), and its first pass over the suite is a warm-up (the worker's fork server, the
  candidates' first builds; the reference children the judge keeps are fewer than the problems,
  so the timed pass sets most of them up again, as any bench does), not compared. Figures:
  verdicts per minute of the timed pass; each candidate's time on N workers over its time on one
  (median over rounds); the statuses. Limits: at least 0.9 N times the verdicts per minute of one
  worker (issue 30's 1.8x for two GPUs), every time within 2 %.
- kill: one bench on N workers (one is allowed), with its store, where the last worker is killed
  (as a kernel that takes its device down would) once a third of the requests went out and it
  judges one. Checks: the kill happened, the bench is complete, every row has the status it had in
  the scale part (or, without it, `correct`), one verdict stored per row and none twice, the pool
  replaced one worker and sent the lost request again (its verdict's log says so).

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
LIMITS = {"throughput_per_worker": 0.9, "time_distance": 0.02}  # 0.9 N: issue 30's 1.8x for two GPUs


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
    rounds of the throughput ratio; whether the statuses agree; against the limits. Only rounds
    with both benches count."""
    if n < 2:
        raise ValueError("scaling compares n workers with one: n must be at least 2")
    rounds = [r for r in rounds if {"1", str(n)} <= set(r["benches"])]
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
            "throughput_limit": LIMITS["throughput_per_worker"] * n,
            "within_limits": bool(same and worst is not None and worst <= LIMITS["time_distance"] and tp is not None
                                  and tp >= LIMITS["throughput_per_worker"] * n)}


def store_count(store: Path) -> int:
    db = sqlite3.connect(store)
    try:
        return int(db.execute("select count(*) from verdicts").fetchone()[0])
    finally:
        db.close()


def kill_check(bench: dict[str, Any], want: dict[str, str], stored: int, replaced: int, retried: int, killed: bool) -> dict[str, Any]:
    ids = [r["verdict_id"] for r in bench["rows"].values()]
    again = sorted(n for n, r in bench["rows"].items() if "[pool] judged again after" in r["log_tail"])
    statuses = {n: r["status"] for n, r in bench["rows"].items()}
    checks = {"killed": killed, "complete": bool(bench["complete"]), "statuses_as_before": statuses == want,
              "one_verdict_per_row": all(ids) and len(set(ids)) == len(ids) and stored == len(ids),
              "replaced_one": replaced >= 1, "sent_again": retried >= 1 and bool(again)}
    return {"checks": checks, "ok": all(checks.values()), "judged_again": again, "stored": stored, "rows": len(ids),
            "replaced": replaced, "retried": retried}


def provenance(a: argparse.Namespace) -> dict[str, Any]:
    import subprocess

    import torch

    try:
        import ray
        ray_version = ray.__version__
    except ImportError:
        ray_version = None
    smi = None
    if a.device == "cuda":
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError):
            smi = None
    return {"commit": hostinfo.commit(a.commit or os.environ.get("KERNELWRIGHT_COMMIT", "unknown")),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpus_and_driver": smi, "torch": torch.__version__,
            "cuda": torch.version.cuda, "ray": ray_version, "python": platform.python_version(), "host_cpu": hostinfo.cpu_model(),
            "command": " ".join(sys.argv)}


class Run:
    """One call of the bench: its arguments, document and suite."""

    def __init__(self, a: argparse.Namespace, doc: dict[str, Any], suite: Path) -> None:
        from kernelwright.judge.policy import Policy

        self.a, self.doc, self.suite = a, doc, suite
        self.policy = Policy(baselines=a.baselines)
        self.path = a.out / "pool_scale.json"

    def save(self) -> None:
        self.path.write_text(json.dumps(self.doc, indent=1))

    def bench_on(self, w: int, store: Path | None = None, killer: Any = None) -> dict[str, Any]:
        from kernelwright.client.pool import Pool

        a = self.a
        t0 = time.perf_counter()
        with Pool(a.backend, workers=w, device=a.device, address=a.address) as pool:
            got: dict[str, Any] = {"workers": w, "start_s": time.perf_counter() - t0, "gpus": pool.gpus()}
            if killer is None:
                got["warmup"] = {k: v for k, v in one_bench(self.suite, a.device, self.policy, pool).items() if k != "rows"}
                print(f"  {w} worker(s): warm-up {got['warmup']['wall_s']:.1f} s", flush=True)
            else:
                threading.Thread(target=killer, args=(pool,), daemon=True).start()
            got.update(one_bench(self.suite, a.device, self.policy, pool, store))
            got.update(replaced=pool.replaced, retried=pool.retried, sent=pool.sent)
        print(f"  {w} worker(s): {got['wall_s']:.1f} s, {got['verdicts_per_min']:.1f} verdicts/min, "
              f"{sorted({r['status'] for r in got['rows'].values()})}", flush=True)
        return got

    def scale(self) -> bool:
        """The rounds not yet in the document (a round cut between its benches goes on); within limits."""
        doc, n = self.doc, self.a.workers
        for k in range(self.a.rounds):
            if k == len(doc["scale"]):
                modes = ["1", str(n)]
                doc["scale"].append({"order": modes[k % 2:] + modes[:k % 2], "benches": {}})
            rnd = doc["scale"][k]
            for m in rnd["order"]:
                if m not in rnd["benches"]:
                    print(f"round {k + 1}: {m} worker(s)", flush=True)
                    rnd["benches"][m] = self.bench_on(int(m))
                    self.save()
            doc["scale_summary"] = scale_summary(doc["scale"], n)
            self.save()
        s = doc["scale_summary"]
        print(f"scale: throughput x{s['throughput_ratio_median']:.2f} (limit {s['throughput_limit']:.2f}), worst time distance "
              f"{s['worst_time_distance']}, statuses same {s['same_statuses']}, within limits {s['within_limits']}", flush=True)
        return bool(s["within_limits"])

    def kill(self) -> bool:
        doc, names, victim = self.doc, self.doc["problems"], self.a.workers - 1
        if doc["kill"] is not None:
            return bool(doc["kill"]["ok"])
        store = self.a.out / "kill_store.sqlite"
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

        print(f"kill: worker {victim} of {self.a.workers} killed mid-bench", flush=True)
        got = self.bench_on(self.a.workers, store, killer)
        done = [r for r in doc["scale"] if str(self.a.workers) in r["benches"]]
        before = done[-1]["benches"][str(self.a.workers)]["rows"] if done else None
        want = {n: r["status"] for n, r in before.items()} if before else {n: "correct" for n in got["rows"]}
        doc["kill"] = {"killed": killed, "bench": got,
                       **kill_check(got, want, store_count(store), got["replaced"], got["retried"], bool(killed))}
        self.save()
        print(f"kill: {json.dumps(doc['kill']['checks'])}; judged again: {doc['kill']['judged_again']}", flush=True)
        return bool(doc["kill"]["ok"])


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
    if "scale" in parts and a.workers < 2:
        ap.error("the scale part compares N workers with one: --workers at least 2 (--parts kill runs on one)")
    if a.backend == "local" and a.address:
        ap.error("--address is a Ray cluster's: it needs --backend ray")
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "pool_scale.json"
    names = write_suite(a.device, a.out / "suite")
    config = {"workers": a.workers, "device": a.device, "backend": a.backend, "baselines": a.baselines}
    if a.resume and path.is_file():
        doc = json.loads(path.read_text())
        if doc["config"] != config or doc["problems"] != names:
            ap.error(f"{path} holds another configuration or suite: {doc['config']}, {len(doc['problems'])} problems")
    else:
        doc = {"config": config, "limits": LIMITS, "problems": names, "calls": [], "scale": [], "kill": None}
    doc["calls"].append(provenance(a))
    run = Run(a, doc, a.out / "suite")
    run.save()
    print(f"{len(names)} problems; workers {a.workers} ({a.backend}, {a.device}); parts {','.join(parts)}", flush=True)
    ok = True
    if "scale" in parts:
        ok = run.scale() and ok
    if "kill" in parts:
        ok = run.kill() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
