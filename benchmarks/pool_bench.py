"""Issue 29's one-GPU figures: the same bench judged by the in-process judge and through the pool
(client.pool) on one worker, in alternating order: statuses, each candidate's time through the pool
over its time alone, and the benches' wall times.

    PYTHONPATH=src python3 benchmarks/pool_bench.py --out DIR [--device cuda] [--suite examples/cuda] [--rounds 2]
        [--backends local,ray] [--solutions DIR ...] [--commit SHA]
    PYTHONPATH=src python3 benchmarks/pool_bench.py --out /tmp/pb --device cpu --suite examples/cpu --rounds 1   # a dry run

A warm-up bench of each mode comes first (`--warmup 1`, the default), outside the rounds: alone's
pays the candidates' and references' first builds, which would otherwise fall on round 1's first
mode, and each pool's pays its worker's first fork server and reference children.
Each round judges the whole suite once alone and once per backend (the order rotates by round, so
warm caches favour no mode), with the default policy but for the baselines: skipped, so the figure
is the candidate's time. The pool's start (a worker importing torch, Ray starting) is timed apart
from its bench. A backend that cannot start here (Ray not installed) is recorded with its reason
and skipped. DIR/pool_bench.json is rewritten after every bench, with provenance. Issue 29's
limits: the same statuses, each time within 2 %, the wall time within 10 %.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import hostinfo  # beside this file: on sys.path when run as a script



def _bench(a: argparse.Namespace, policy: Any, pool: Any) -> dict[str, Any]:
    from kernelwright.report.bench import BenchConfig, run_bench

    t0 = time.perf_counter()
    doc = run_bench(BenchConfig(suite=a.suite, sources=tuple(a.solutions), device=a.device, keep=False, pool=pool), policy)
    return {"wall_s": time.perf_counter() - t0,
            "rows": {r["name"]: {"status": r["status"], "runtime_ms": (r.get("verdict") or {}).get("runtime_ms")} for r in doc["problems"]}}


def compare(alone: dict[str, Any], pooled: dict[str, Any]) -> dict[str, Any]:
    """One pooled bench against the alone bench of its round: statuses equal, per-problem time
    ratios (pool over alone), their worst distance from 1, and the wall-time ratio."""
    names = sorted(alone["rows"])
    same = all(alone["rows"][n]["status"] == pooled["rows"].get(n, {}).get("status") for n in names)
    ratios = {n: pooled["rows"][n]["runtime_ms"] / alone["rows"][n]["runtime_ms"] for n in names
              if alone["rows"][n]["runtime_ms"] and (pooled["rows"].get(n) or {}).get("runtime_ms")}
    worst = max((abs(r - 1) for r in ratios.values()), default=None)
    return {"same_statuses": same, "time_ratios": ratios, "worst_time_distance": worst, "wall_ratio": pooled["wall_s"] / alone["wall_s"],
            "within_limits": same and worst is not None and worst <= 0.02 and abs(pooled["wall_s"] / alone["wall_s"] - 1) <= 0.10}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--suite", default=None, help="default: examples/DEVICE")
    ap.add_argument("--solutions", nargs="*", default=[])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--backends", default="local,ray")
    ap.add_argument("--warmup", type=int, default=1, help="benches alone before the rounds, not compared (default 1)")
    ap.add_argument("--commit", default=os.environ.get("KERNELWRIGHT_COMMIT", "unknown"))
    a = ap.parse_args(argv)
    a.suite = a.suite or f"examples/{a.device}"
    backends = [b for b in a.backends.split(",") if b]
    if a.rounds < 1 or not set(backends) <= {"local", "ray"}:
        ap.error("--rounds at least 1; --backends among local, ray")
    import torch

    from kernelwright.client.pool import Pool
    from kernelwright.judge.policy import Policy

    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "pool_bench.json"
    gpu = torch.cuda.get_device_name(0) if a.device == "cuda" and torch.cuda.is_available() else None
    doc: dict[str, Any] = {"provenance": {"commit": hostinfo.commit(a.commit), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": a.device,
                                          "gpu": gpu, "torch": torch.__version__, "python": platform.python_version(), "command": " ".join(sys.argv)},
                           "rounds": [], "skipped": {}}
    policy = Policy(baselines="skip")
    pools: dict[str, Any] = {}
    for b in backends:
        t0 = time.perf_counter()
        try:
            pools[b] = Pool(b, workers=1, device=a.device)
            doc.setdefault("start_s", {})[b] = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - recorded: e.g. Ray missing on the GPU machine
            doc["skipped"][b] = f"{type(exc).__name__}: {exc}"[:500]
    modes = ["alone", *pools]
    try:
        for _ in range(max(0, a.warmup)):
            for m in modes:
                w = _bench(a, policy, pools.get(m))
                doc.setdefault("warmup", []).append({"mode": m, **w})
                print(f"warm-up: {m} {w['wall_s']:.1f} s {sorted({r['status'] for r in w['rows'].values()})}", flush=True)
        for k in range(a.rounds):
            order = modes[k % len(modes):] + modes[:k % len(modes)]
            got: dict[str, Any] = {}
            for m in order:
                got[m] = _bench(a, policy, pools.get(m))
                print(f"round {k + 1}: {m} {got[m]['wall_s']:.1f} s {sorted({r['status'] for r in got[m]['rows'].values()})}", flush=True)
            doc["rounds"].append({"order": order, "benches": got, "vs_alone": {m: compare(got["alone"], got[m]) for m in pools}})
            path.write_text(json.dumps(doc, indent=1))
    finally:
        for p in pools.values():
            p.close()
    worst = {m: max(r["vs_alone"][m]["worst_time_distance"] or 0 for r in doc["rounds"]) for m in pools}
    walls = {m: statistics.median(r["vs_alone"][m]["wall_ratio"] for r in doc["rounds"]) for m in pools}
    doc["summary"] = {m: {"same_statuses": all(r["vs_alone"][m]["same_statuses"] for r in doc["rounds"]), "worst_time_distance": worst[m],
                          "median_wall_ratio": walls[m]} for m in pools}
    path.write_text(json.dumps(doc, indent=1))
    print(json.dumps({"summary": doc["summary"], "skipped": doc["skipped"], "start_s": doc.get("start_s")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
