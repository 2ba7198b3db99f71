"""Seconds per verdict with warm workers: children forked from the fork server, warm reference
children, against the old process model (every child spawned afresh), on one machine in one run.

    PYTHONPATH=src python3 benchmarks/warm_bench.py --out DIR --commit C [--device cuda] [--sections ...]

Sections: sanity (machine; the fork server's preload loads no CUDA driver), baseline (the example's
eager and torch.compile times into DIR's store, so verdicts can take them cached), oneshot (one
`kernelwright eval` process per verdict, spawned and forked children), sequential (verdicts one
after another in one process: spawned children; forked children without warm references; warm;
warm correctness-only; the first warm verdict is the cold reference), and protocol (each verdict's
steps, cases, seeds, timed calls and stop rule, spawned against warm). Writes DIR/warm_bench.json
(provenance in it) and DIR/warm_bench.log; prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("sanity", "baseline", "oneshot", "sequential", "protocol")
MODES = {  # environment of each way of judging
    "spawn": {"KERNELWRIGHT_FORKSERVER": "0", "KERNELWRIGHT_WARM_REFERENCES": "0"},
    "fork": {"KERNELWRIGHT_FORKSERVER": "1", "KERNELWRIGHT_WARM_REFERENCES": "0"},
    "warm": {"KERNELWRIGHT_FORKSERVER": "1", "KERNELWRIGHT_WARM_REFERENCES": "2"},
}


def provenance(a: argparse.Namespace) -> dict[str, Any]:
    gpu = driver = None
    if a.device == "cuda":
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout
        gpu, _, driver = (smi.strip().splitlines() or [""])[0].partition(",")
    import torch

    return {"gpu": (gpu or platform.processor() or "cpu").strip(), "driver": (driver or "").strip() or None, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(), "commit": a.commit, "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)}


def log_line(a: argparse.Namespace, text: str) -> None:
    with open(a.out / "warm_bench.log", "a") as f:
        f.write(text.rstrip() + "\n")
    print(text, file=sys.stderr, flush=True)


def sec_sanity(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    from kernelwright.judge import forkpool

    os.environ.update(MODES["warm"])
    t0 = time.perf_counter()
    srv = forkpool.server()
    ready = srv.wait_ready()
    maps = Path(f"/proc/{srv.pid}/maps").read_text()
    fds = []
    for fd in os.listdir(f"/proc/{srv.pid}/fd"):
        try:
            fds.append(os.readlink(f"/proc/{srv.pid}/fd/{fd}"))
        except OSError:
            pass
    doc["sanity"] = {"fork_server_ready_s": time.perf_counter() - t0, "preload_s": ready.get("preload_s"),
                     "libcuda_mapped_in_fork_server": "libcuda.so" in maps, "torch_in_fork_server": "libtorch" in maps,
                     "nvidia_device_files_open_in_fork_server": [f for f in fds if f.startswith("/dev/nvidia")]}


def sec_baseline(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    cmd = [sys.executable, "-m", "kernelwright", "baseline", "--suite", str(a.problem), "--device", a.device, "--store", str(a.store), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    log_line(a, f"$ {' '.join(cmd)} [{time.perf_counter() - t0:.1f} s rc={proc.returncode}]\n{proc.stderr[-3000:]}")
    doc["baseline"] = {"rc": proc.returncode, "wall_s": time.perf_counter() - t0, "stdout": proc.stdout[-2000:]}


def sec_oneshot(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    rows = []
    for mode in ("spawn", "warm"):
        cmd = [sys.executable, "-m", "kernelwright", "eval", str(a.problem), str(a.candidate), "--device", a.device, "--json",
               "--no-store", "--baselines", "cached", "--store", str(a.store)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, **MODES[mode], "KERNELWRIGHT_LOG": "INFO"})
        wall = time.perf_counter() - t0
        log_line(a, f"$ [{mode}] {' '.join(cmd)} [{wall:.1f} s rc={proc.returncode}]\n{proc.stderr[-4000:]}")
        verdict = _json(proc.stdout)
        rows.append({"mode": mode, "wall_s": wall, "status": verdict.get("status"), "runtime_ms": verdict.get("runtime_ms")})
    doc["oneshot"] = rows


def _json(text: str) -> dict[str, Any]:
    try:
        return json.loads(text)
    except ValueError:
        return {}


def _policy(a: argparse.Namespace, correctness_only: bool) -> Any:
    from kernelwright.judge.policy import Policy

    return Policy(baselines="cached", time_candidate=not correctness_only)


def judge_once(a: argparse.Namespace, mode: str, correctness_only: bool = False) -> dict[str, Any]:
    from kernelwright.judge.evaluate import evaluate

    os.environ.update(MODES[mode])
    phases: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    verdict = evaluate(a.problem, a.candidate, _policy(a, correctness_only), device=a.device, baseline_store=a.store,
                       progress=lambda m: phases.append((round(time.perf_counter() - t0, 3), m)))
    wall = time.perf_counter() - t0
    d = verdict.to_dict()
    return {"mode": mode, "correctness_only": correctness_only, "wall_s": wall, "status": d["status"], "runtime_ms": d["runtime_ms"],
            "eager_ms": d["eager_ms"], "compile_ms": d["compile_ms"], "baseline_source": d["baseline_source"], "timing": d["timing"],
            "steps": d["steps"], "phases": phases, "log": (d.get("log") or "")[:3000]}


def sec_sequential(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    from kernelwright.judge import refpool

    rows = []
    plan = [("spawn", False, a.n_spawn), ("fork", False, a.n_fork), ("warm", False, a.n_warm), ("warm", True, a.n_co)]
    for mode, co, n in plan:
        refpool.POOL.close()  # each mode's first verdict sets a reference child up (the cold reference)
        for i in range(n):
            row = judge_once(a, mode, co)
            row["index"] = i
            rows.append(row)
            log_line(a, f"{mode}{' correctness-only' if co else ''} #{i}: {row['wall_s']:.2f} s {row['status']} runtime {row['runtime_ms']}")
            if row["status"] != "correct":
                log_line(a, "  log: " + row["log"][:1500])
    doc["sequential"] = rows
    doc["sequential_summary"] = summarize(rows)


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for mode, co in (("spawn", False), ("fork", False), ("warm", False), ("warm", True)):
        walls = [r["wall_s"] for r in rows if r["mode"] == mode and r["correctness_only"] == co]
        if not walls:
            continue
        later = walls[1:] or walls
        q = statistics.quantiles(later, n=10) if len(later) >= 2 else [later[0]] * 9
        times = [r["runtime_ms"] for r in rows if r["mode"] == mode and r["correctness_only"] == co and r["runtime_ms"]]
        out.append({"mode": mode + (" correctness-only" if co else ""), "n": len(walls), "first_s": walls[0], "p50_s": statistics.median(later),
                    "p90_s": q[8], "runtime_ms_median": statistics.median(times) if times else None})
    return out


def sec_protocol(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """What each verdict did, spawned against warm: the same steps ran, the same cases and seeds."""
    rows = doc.get("sequential") or []
    def shape(r: dict[str, Any]) -> dict[str, Any]:
        return {"steps_ran": sorted(s["name"] for s in r["steps"] if s["ran"]), "steps_not_ran": sorted(s["name"] for s in r["steps"] if not s["ran"]),
                "details": {s["name"]: s.get("reason", "") for s in r["steps"] if s["name"] in ("seeds", "distributions", "extra_shapes", "near_duplicate")},
                "timed_calls": (r.get("timing") or {}).get("n")}
    pick = {m: next((r for r in rows if r["mode"] == m and not r["correctness_only"]), None) for m in ("spawn", "warm")}
    doc["protocol"] = {m: shape(r) for m, r in pick.items() if r}
    if all(pick.values()):
        s, w = doc["protocol"]["spawn"], doc["protocol"]["warm"]
        doc["protocol"]["same_steps"] = s["steps_ran"] == w["steps_ran"] and s["details"] == w["details"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--example", default="softmax", help="examples/DEVICE/NAME: the problem and its candidate")
    p.add_argument("--n-spawn", type=int, default=2)
    p.add_argument("--n-fork", type=int, default=3)
    p.add_argument("--n-warm", type=int, default=12)
    p.add_argument("--n-co", type=int, default=6, help="warm correctness-only verdicts")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    ex = ROOT / "examples" / a.device / a.example
    a.problem, a.candidate, a.store = ex / "problem.py", ex, a.out / "store.sqlite"
    os.environ.setdefault("KERNELWRIGHT_CACHE", str(a.out / "cache"))
    doc: dict[str, Any] = {"provenance": provenance(a)}
    path = a.out / "warm_bench.json"
    for name in a.sections.split(","):
        t0 = time.perf_counter()
        try:
            globals()[f"sec_{name}"](a, doc)
        except Exception as exc:  # noqa: BLE001 - one broken section must not lose the others
            doc.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
        log_line(a, f"section {name}: {time.perf_counter() - t0:.1f} s")
        path.write_text(json.dumps(doc, indent=1, default=str))
    print(json.dumps({"sanity": doc.get("sanity"), "oneshot": doc.get("oneshot"), "errors": doc.get("errors")}, default=str))
    for r in doc.get("sequential_summary", []):
        print(f"{r['mode']:<26} n={r['n']:<3} first {r['first_s']:6.2f} s  p50 {r['p50_s']:6.2f} s  p90 {r['p90_s']:6.2f} s  runtime {r['runtime_ms_median']}")
    print("same steps spawned and warm:", (doc.get("protocol") or {}).get("same_steps"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
