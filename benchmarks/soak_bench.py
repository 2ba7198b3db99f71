"""Fault soak through `kernelwright serve`: many verdicts, some candidates faulty, workers killed.

    PYTHONPATH=src python3 benchmarks/soak_bench.py --out DIR --commit C [--verdicts 300] [--clients 4]

The problem is benchmarks/soak_problem.py (y = 2 x + 1, 8 MiB). The candidates are written into
DIR/candidates from one kernel source with a knob: honest_a and honest_b (right, 256 and 512
threads a block), crash (its process aborts in forward), hang (a kernel that never ends) and
illegal (writes through a null pointer). The run: baselines cached; a service with --workers
CLIENTS on a unix socket; one warm-up verdict per honest candidate; a quiet run (QUIET verdicts
of each honest candidate); then the soak: VERDICTS verdicts, one in ten faulty (crash, hang and
illegal in turn), submitted by CLIENTS threads at once, while a killer SIGKILLs the busiest
reference child (the judge's own worker) twice, at a third and at two thirds of the soak. Before
the soak, with no verdict in flight, every reference child (all idle in the warm pool) is killed.

What must hold (printed and written to DIR/soak_bench.json, with provenance): every request
answered exactly once; crash and illegal `runtime_error`, hang `timeout`; every honest verdict
`correct` except at most one `infra_error` per kill mid-verdict (none for the idle ones), which
must name the reference child; each
honest candidate's median within 2 % of its quiet run. No LLM is involved: the candidates are
fixed files.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import hostinfo  # beside this file, on sys.path when run as a script
from verdict_phases import milestones, phase_medians

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "benchmarks" / "soak_problem.py"
EXPECTED = {"honest_a": "correct", "honest_b": "correct", "crash": "runtime_error", "hang": "timeout", "illegal": "runtime_error"}
FAULTY = ("crash", "hang", "illegal")

KERNEL = r'''
#include <cuda_runtime.h>

__global__ void affine(const float* __restrict__ x, float* __restrict__ y, long n, int fault, volatile int* zero) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (fault == 1 && i == 0) {
        while (zero[0] == 0) { }  // nothing ever writes it: the kernel never ends (one thread spins, the rest finish)
    }
    if (fault == 2 && i == 0) {
        ((float*)16)[0] = 1.0f;  // an illegal address
    }
    for (; i < n; i += (long)gridDim.x * blockDim.x) y[i] = fmaf(x[i], 2.0f, 1.0f);
}

extern "C" int affine_forward(const float* x, float* y, long n, int fault, int threads, int* zero, cudaStream_t stream) {
    long blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    affine<<<(unsigned)blocks, threads, 0, stream>>>(x, y, n, fault, zero);
    return (int)cudaGetLastError();
}
'''

TEMPLATE = '''"""Soak candidate {name} (benchmarks/soak_bench.py): fault {fault}, {threads} threads a block."""

import torch
import torch.nn as nn

from kernelwright import runtime

SOURCE = r"""{kernel}"""
lib = runtime.load(SOURCE, name="soak_affine")


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        zero = torch.zeros(1, dtype=torch.int32, device=x.device)
        lib.affine_forward(x, y, x.numel(), {fault}, {threads}, zero)
        return y
'''

CRASH = '''"""Soak candidate crash (benchmarks/soak_bench.py): its process aborts (SIGABRT) in forward."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os.abort()
        return x
'''


def write_candidates(folder: Path) -> dict[str, Path]:
    knobs = {"honest_a": (0, 256), "honest_b": (0, 512), "hang": (1, 256), "illegal": (2, 256)}
    out = {}
    for name in EXPECTED:
        d = folder / name
        d.mkdir(parents=True, exist_ok=True)
        text = CRASH if name == "crash" else TEMPLATE.format(name=name, fault=knobs[name][0], threads=knobs[name][1], kernel=KERNEL)
        (d / "model_new.py").write_text(text)
        out[name] = d
    return out


def provenance(a: argparse.Namespace) -> dict[str, Any]:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True)
    import torch

    return {"gpu": smi.stdout.strip(), "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "commit": a.commit, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(sys.argv), "cpus": os.cpu_count(),
            "llm": "none: the candidates are fixed files written by this script", "host": hostinfo.host()}


class Log:
    def __init__(self, path: Path) -> None:
        self.f = open(path, "a")
        self.t0 = time.perf_counter()
        self.lock = threading.Lock()

    def __call__(self, text: str) -> None:
        line = f"[{time.perf_counter() - self.t0:7.1f} s] {text}"
        with self.lock:
            print(line, flush=True)
            self.f.write(line + "\n")
            self.f.flush()


def start_service(a: argparse.Namespace, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    sock = a.out / "serve" / "kw.sock"
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "kernelwright", "serve", "--socket", str(sock), "--workers", str(a.clients)],
                            stdout=open(a.out / "serve.log", "ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
    from kernelwright.client.judge import wait_for

    url = f"unix://{sock}"
    wait_for(url, timeout_s=120)
    return proc, url


def judge_one(url: str, name: str, cand: Path, policy: Any) -> dict[str, Any]:
    from kernelwright.client import Judge

    t0 = time.perf_counter()
    judge = Judge(url)
    try:
        v = judge.evaluate(PROBLEM, cand, policy).to_dict()
    except Exception as exc:  # noqa: BLE001 - a request without a verdict is what the soak looks for
        return {"candidate": name, "status": f"no verdict: {type(exc).__name__}: {exc}"[:300], "wall_s": time.perf_counter() - t0}
    return {"candidate": name, "status": v["status"], "wall_s": time.perf_counter() - t0, "runtime_ms": v.get("runtime_ms"),
            "log_tail": (v.get("log") or "")[-600:] if v["status"] != "correct" else "",
            "service": milestones(getattr(judge, "last_job", None) or {})}


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        for k in map(int, kids):
            out.append(k)
            todo.append(k)
    return out


def _cpu(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return -1


def reference_children(service_pid: int) -> list[int]:
    """The service's reference children (stdout into a reference.log)."""
    refs = []
    for p in descendants(service_pid):
        try:
            if os.readlink(f"/proc/{p}/fd/1").endswith("reference.log"):
                refs.append(p)
        except OSError:
            continue
    return refs


def kill_idle_references(service_pid: int, log: Log, kills: list[dict[str, Any]]) -> None:
    """Between two batches (no verdict in flight): SIGKILL every reference child, all idle in the
    warm pool. The verdicts that take them next must set up new ones, not end `infra_error`."""
    for pid in reference_children(service_pid):
        os.kill(pid, signal.SIGKILL)
        kills.append({"pid": pid, "after_verdicts": 0, "time": time.time(), "kind": "idle"})
        log(f"killer: SIGKILL to idle reference child {pid} before the soak")


def busiest_reference(service_pid: int) -> int | None:
    """The reference child (stdout into a reference.log) that used the most CPU in the last 0.2 s."""
    refs = reference_children(service_pid)
    before = {p: _cpu(p) for p in refs}
    time.sleep(0.2)
    busy = sorted(((_cpu(p) - before[p], p) for p in refs if before[p] >= 0), reverse=True)
    return busy[0][1] if busy and busy[0][0] > 0 else None  # one that worked: a verdict's, not an idle one


def killer(service_pid: int, at: list[int], done: list[int], log: Log, kills: list[dict[str, Any]], stop: threading.Event) -> None:
    for target in at:
        while len(done) < target and not stop.is_set():
            time.sleep(0.05)
        if stop.is_set():
            return
        pid, deadline = None, time.monotonic() + 30
        while pid is None and time.monotonic() < deadline and not stop.is_set():
            pid = busiest_reference(service_pid)
        if pid is None:
            log(f"killer: no busy reference child found after {len(done)} verdicts")
            continue
        os.kill(pid, signal.SIGKILL)
        kills.append({"pid": pid, "after_verdicts": len(done), "time": time.time(), "kind": "busy"})
        log(f"killer: SIGKILL to reference child {pid} after {len(done)} verdicts")


def plan(n: int, seed: int) -> list[str]:
    names = []
    for i in range(n):
        names.append(FAULTY[(i // 10) % 3] if i % 10 == 9 else ("honest_a", "honest_b")[i % 2])
    rng = random.Random(seed)
    rng.shuffle(names)
    return names


def run_batch(url: str, cands: dict[str, Path], names: list[str], clients: int, policy: Any, log: Log, tag: str,
              done: list[int] | None = None, deadline: float = float("inf"), sink: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Judge names[i] for every i with CLIENTS threads; past the deadline (time.monotonic) the rest
    are not submitted (their rows say so). Each row also goes to sink as it comes."""
    done = done if done is not None else []
    sink = sink if sink is not None else []

    def one(i_name: tuple[int, str]) -> dict[str, Any]:
        i, name = i_name
        if time.monotonic() > deadline:
            return {"candidate": name, "index": i, "status": "not submitted"}
        row = judge_one(url, name, cands[name], policy)
        row["index"] = i
        done.append(i)
        sink.append(row)
        if row["status"] != EXPECTED[name] or i % 25 == 0:
            log(f"{tag} #{i} {name}: {row['status']} in {row['wall_s']:.2f} s {row.get('runtime_ms')}")
        return row

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return list(pool.map(one, enumerate(names)))


def judge_rows(rows: list[dict[str, Any]], quiet: dict[str, float], kills: list[dict[str, Any]], submitted: int) -> dict[str, Any]:
    wrong = [r for r in rows if r["status"] != EXPECTED[r["candidate"]]]
    infra = [r for r in wrong if r["status"] == "infra_error" and r["candidate"] in ("honest_a", "honest_b") and "reference child" in r["log_tail"]]
    other = [r for r in wrong if r not in infra]
    busy = [k for k in kills if k.get("kind", "busy") == "busy"]
    medians = {}
    for name in ("honest_a", "honest_b"):
        times = [r["runtime_ms"] for r in rows if r["candidate"] == name and r["status"] == "correct" and r.get("runtime_ms")]
        if times and quiet.get(name):
            m = statistics.median(times)
            medians[name] = {"soak_ms": m, "quiet_ms": quiet[name], "ratio": m / quiet[name], "n": len(times)}
    return {
        # client side: one row per submitted request, none of them "no verdict" (the service has no way to answer one twice to a client)
        "submitted": submitted, "answered": sum(not r["status"].startswith("no verdict") for r in rows),
        "answered_once": len({r["index"] for r in rows}) == len(rows) == submitted and not any(r["status"].startswith("no verdict") for r in rows),
        "by_status": {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})},
        "faulty_right": all(r["status"] == EXPECTED[r["candidate"]] for r in rows if r["candidate"] in FAULTY),
        "infra_from_kills": len(infra), "kills": len(kills), "busy_kills": len(busy),
        "unexpected": [{k: r.get(k) for k in ("index", "candidate", "status", "log_tail")} for r in other],
        "medians": medians, "medians_within_2pct": bool(medians) and all(abs(m["ratio"] - 1) <= 0.02 for m in medians.values()),
        # a kill mid-verdict may cost that verdict (infra_error, the judge's worker died); a kill of an idle one costs none
        "ok": not other and len(infra) <= len(busy) and bool(medians) and all(abs(m["ratio"] - 1) <= 0.02 for m in medians.values()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--verdicts", type=int, default=300)
    p.add_argument("--quiet", type=int, default=8, help="quiet verdicts of each honest candidate")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--run-timeout", type=float, default=5.0, help="the policy's run_timeout_s (a hang costs this)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--deadline-s", type=float, default=1e9, help="submit no more soak verdicts this many seconds after the script started "
                   "(its setup included: below the caller's time limit, the summary is always written)")
    a = p.parse_args()
    started = time.monotonic()
    a.out.mkdir(parents=True, exist_ok=True)
    log = Log(a.out / "soak_bench.log")
    from kernelwright.judge.policy import Policy

    cands = write_candidates(a.out / "candidates")
    store = a.out / "store.sqlite"
    env = {**os.environ, "KERNELWRIGHT_STORE": str(store), "PYTHONPATH": str(ROOT / "src")}
    doc: dict[str, Any] = {"provenance": provenance(a)}
    path = a.out / "soak_bench.json"
    t0 = time.perf_counter()
    b = subprocess.run([sys.executable, "-m", "kernelwright", "baseline", "--suite", str(PROBLEM), "--device", "cuda", "--store", str(store), "--json"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    log(f"baselines cached in {time.perf_counter() - t0:.1f} s (rc {b.returncode})")
    proc, url = start_service(a, env)
    policy = Policy(baselines="cached", run_timeout_s=a.run_timeout)
    try:
        warm = run_batch(url, cands, ["honest_a", "honest_b"], 2, policy, log, "warm-up")
        log(f"warm-up: {[(r['candidate'], r['status'], round(r['wall_s'], 2)) for r in warm]}")
        quiet_rows = run_batch(url, cands, ["honest_a", "honest_b"] * a.quiet, a.clients, policy, log, "quiet")
        quiet = {n: statistics.median([r["runtime_ms"] for r in quiet_rows if r["candidate"] == n and r.get("runtime_ms")] or [0]) for n in ("honest_a", "honest_b")}
        doc["quiet"] = {"medians_ms": quiet, "statuses": sorted({r["status"] for r in quiet_rows})}
        log(f"quiet medians {quiet}")
        names = plan(a.verdicts, a.seed)
        done: list[int] = []
        kills: list[dict[str, Any]] = []
        kill_idle_references(proc.pid, log, kills)
        stop = threading.Event()
        k = threading.Thread(target=killer, args=(proc.pid, [a.verdicts // 3, 2 * a.verdicts // 3], done, log, kills, stop), daemon=True)
        k.start()
        t1 = time.perf_counter()
        sink: list[dict[str, Any]] = []
        doc.update(soak=sink, kills=kills)
        rows = run_batch(url, cands, names, a.clients, policy, log, "soak", done, started + a.deadline_s, sink)
        wall = time.perf_counter() - t1
        stop.set()
        rows = [r for r in rows if r["status"] != "not submitted"]
        summary = judge_rows(rows, quiet, kills, sum(1 for _ in rows))
        summary.update(wall_s=wall, per_minute=60 * len(rows) / wall, planned=len(names), all_planned=len(rows) == len(names),
                       phases=phase_medians(rows), quiet_phases=phase_medians(quiet_rows))
        summary["ok"] = summary["ok"] and summary["all_planned"]  # the row asks for every planned verdict
        doc.update(soak=rows, summary=summary)
        log(f"soak: {json.dumps(summary, default=str)[:3000]}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        path.write_text(json.dumps(doc, indent=1, default=str))
    return 0 if doc.get("summary", {}).get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
