"""A newcomer's first hour on a CPU box: the commands they run on the built-in problems, timed, with
the peak memory of everything each command started.

    PYTHONPATH=src python3 benchmarks/cpu_first_hour.py --out DIR [--problems a,b] [--commands eval,workspace,check,optimize]
        [--size auto|full|cpu] [--timeout-s 900]

For each problem (default: every built-in one) and each command, the command runs twice in a
subprocess, as a user would type it: the first run is reported as `cold` (the store, the build
cache and inductor's caches empty for that problem; the OS page cache and anything an earlier
problem filled stay warm), the second as `warm`. The issue's targets are for the warm run: at most
30 s and 2 GiB each.
- eval: `kernelwright eval builtin:NAME CAND --allow-torch-compute`, CAND being the problem's own
  file with `ModelNew = Model` appended (the reference as a candidate: correctness, timing and both
  baselines, torch.compile's included, under the default policy);
- workspace: `kernelwright workspace init builtin:NAME WS` then `kernelwright check --quick` in
  it (a new workspace each run; the template candidate, as the newcomer finds it);
- check: `kernelwright problems check builtin:NAME`;
- optimize: `kernelwright optimize builtin:NAME --model openai:scripted --max-turns 1
  --allow-torch-compute --no-sanitize` against the scripted local server (llm.scripted, no LLM),
  whose one reply is the reference as ModelNew; the run's final re-judge and export included.
Every command gets `--size` (default auto: the CPU size on this box), and the store is
DIR/store.sqlite (never the user's).

Peak memory: the benchmark makes itself a child subreaper (prctl), so no process the command starts
can leave its tree by being orphaned, and every 50 ms reads /proc for every descendant of the
command: the sum of their proportional set sizes (Pss, /proc/PID/smaps_rollup; a page shared by
forked children counts once in all) is `peak_mib`, the sum of their resident sets (VmRSS, shared
pages counted in each) `peak_rss_mib`, an upper bound. A process that lives less than 50 ms may be
missed. The box is shared: absolute times here are this machine's, never a published claim.

Writes DIR/cpu_first_hour.json (rows and provenance) and DIR/cpu_first_hour.md (a table).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

COMMANDS = ("eval", "workspace", "check", "optimize")
TARGET_S, TARGET_MIB = 30.0, 2048.0
POLL_S = 0.05
DID_ITS_JOB = (0, 3, 4, 5, 6, 7)  # exit codes of a command that reached its answer (a check's verdict codes included)
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])  # after the command name, which may hold spaces
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree(root: int) -> list[int]:
    kids, out, todo = _children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def _kib(path: str, field: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Peak(threading.Thread):
    """Polls the process tree under `pid` until stopped; keeps the peak sums of Pss and of RSS."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.stop = pid, threading.Event()
        self.pss_kib = self.rss_kib = self.procs = 0

    def run(self) -> None:
        while not self.stop.is_set():
            pids = _tree(self.pid)
            self.procs = max(self.procs, len(pids))
            self.pss_kib = max(self.pss_kib, sum(_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids))
            self.rss_kib = max(self.rss_kib, sum(_kib(f"/proc/{p}/status", "VmRSS:") for p in pids))
            self.stop.wait(POLL_S)


def measure(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float, log: Path) -> dict[str, Any]:
    """Run one command line; its wall time, peak memory, exit code and stdout."""
    t0 = time.perf_counter()
    with open(log, "a") as err:
        err.write(f"$ {' '.join(argv)}\n")
        err.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=cwd, start_new_session=True)
        peak = Peak(proc.pid)
        peak.start()
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, rc = proc.communicate()[0], "timeout"
        wall = time.perf_counter() - t0
        peak.stop.set()
        peak.join()
    _reap()
    return {"wall_s": round(wall, 2), "peak_mib": round(peak.pss_kib / 1024, 1), "peak_rss_mib": round(peak.rss_kib / 1024, 1),
            "processes": peak.procs, "rc": rc, "stdout": out}


def _reap() -> None:
    """Collect orphans that were reparented to this subreaper."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kw(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelwright", *args]


def _verdict_size(stdout: str) -> str | None:
    try:
        data = json.loads(stdout)
    except ValueError:
        return None
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict) and isinstance(data.get("verdict"), dict):  # check --json: the verdict inside
        data = data["verdict"]
    problem = data.get("problem") if isinstance(data, dict) else None
    return (problem.get("size") if isinstance(problem, dict) else data.get("size")) if data else None


def run_eval(name: str, work: Path, env: dict[str, str], size: str, timeout_s: float, log: Path) -> dict[str, Any]:
    from kernelwright.problems.loader import load_problem

    cand = work / f"cand_{name}"
    cand.mkdir(exist_ok=True)
    (cand / "model_new.py").write_text(load_problem(f"builtin:{name}").source + "\n\nModelNew = Model\n")
    res = measure(_kw("eval", f"builtin:{name}", str(cand), "--allow-torch-compute", "--size", size, "--json"), env, work, timeout_s, log)
    try:
        res["status"] = json.loads(res["stdout"]).get("status")
    except ValueError:
        res["status"] = None
    return res


def run_workspace(name: str, work: Path, env: dict[str, str], size: str, timeout_s: float, log: Path) -> dict[str, Any]:
    ws = work / f"ws_{name}_{time.monotonic_ns()}"
    init = measure(_kw("workspace", "init", f"builtin:{name}", str(ws), "--size", size), env, work, timeout_s, log)
    check = measure(_kw("check", "--quick", "--json"), env, ws, timeout_s, log) if init["rc"] == 0 else \
        {"wall_s": 0.0, "peak_mib": 0.0, "peak_rss_mib": 0.0, "processes": 0, "rc": "skipped", "stdout": ""}
    shutil.rmtree(ws, ignore_errors=True)
    try:
        status = json.loads(check["stdout"]).get("status")
    except (ValueError, AttributeError):
        status = None
    return {"wall_s": round(init["wall_s"] + check["wall_s"], 2), "peak_mib": max(init["peak_mib"], check["peak_mib"]),
            "peak_rss_mib": max(init["peak_rss_mib"], check["peak_rss_mib"]), "processes": max(init["processes"], check["processes"]),
            "rc": check["rc"] if init["rc"] == 0 else init["rc"], "init_s": init["wall_s"], "check_s": check["wall_s"],
            "stdout": check["stdout"], "status": status}


def run_check(name: str, work: Path, env: dict[str, str], size: str, timeout_s: float, log: Path) -> dict[str, Any]:
    res = measure(_kw("problems", "check", f"builtin:{name}", "--size", size, "--json"), env, work, timeout_s, log)
    try:
        res["status"] = "degenerate" if json.loads(res["stdout"])[0]["degenerate"] else "ok"
    except (ValueError, LookupError, TypeError):
        res["status"] = None
    return res


def run_optimize(name: str, work: Path, env: dict[str, str], size: str, timeout_s: float, log: Path) -> dict[str, Any]:
    """One model turn from the scripted local server (no LLM): a reply whose code block is the
    reference as ModelNew; then the run's final re-judge on fresh seeds and the export."""
    from kernelwright.llm.scripted import ScriptedServer
    from kernelwright.problems.loader import load_problem

    code = load_problem(f"builtin:{name}").source + "\n\nclass ModelNew(Model):  # the reference itself\n    pass\n"
    script = [{"text": f"The reference itself, as a first candidate.\n\n```python\n{code}```\n"}]
    out = work / f"opt_{name}_{time.monotonic_ns()}"
    with ScriptedServer(script) as server:
        res = measure(_kw("optimize", f"builtin:{name}", "--model", "openai:scripted", "--base-url", server.url, "--max-turns", "1",
                          "--allow-torch-compute", "--no-sanitize", "--size", size, "--out", str(out), "--json"), env, work, timeout_s, log)
    shutil.rmtree(out, ignore_errors=True)
    try:
        res["status"] = (json.loads(res["stdout"]).get("final_verdict") or {}).get("status") or "no verdict"
    except (ValueError, AttributeError):
        res["status"] = None
    return res


RUNNERS = {"eval": run_eval, "workspace": run_workspace, "check": run_check, "optimize": run_optimize}


def provenance(argv: list[str]) -> dict[str, Any]:
    from hostinfo import calibration_ms, cpu_model

    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip())
    except OSError:
        commit, dirty = "unknown", None
    import torch

    return {"commit": commit, "dirty": dirty, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([sys.executable, *argv]), "cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version(), "calibration": calibration_ms(), "gpu": None,
            "memory_method": "peak over 50 ms polls of the sum of Pss (smaps_rollup) over the command's process tree; subreaper held"}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| problem | command | size | cold s | cold MiB | warm s | warm MiB | warm RSS-sum MiB | status | within targets |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        c, w = r["cold"], r["warm"]
        ok = w["rc"] in DID_ITS_JOB and w["wall_s"] <= TARGET_S and w["peak_mib"] <= TARGET_MIB
        lines.append(f"| {r['problem']} | {r['command']} | {r.get('size') or '-'} | {c['wall_s']} | {c['peak_mib']} | {w['wall_s']} | "
                     f"{w['peak_mib']} | {w['peak_rss_mib']} | {w.get('status')} (rc {w['rc']}) | {'yes' if ok else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--problems", default=None, help="comma-separated built-in names (default: all)")
    ap.add_argument("--commands", default=",".join(COMMANDS), help=f"comma-separated, of {COMMANDS}")
    ap.add_argument("--size", default="auto", choices=("auto", "full", "cpu"))
    ap.add_argument("--timeout-s", type=float, default=900.0, help="per command")
    args = ap.parse_args(argv)
    from kernelwright.problems.suite import load_suite

    names = args.problems.split(",") if args.problems else [e.problem.name for e in load_suite("builtin")]
    commands = args.commands.split(",")
    bad = [c for c in commands if c not in COMMANDS]
    if bad:
        ap.error(f"unknown commands {bad}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    subreaper = _become_subreaper()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KERNELWRIGHT_STORE": str(args.out / "store.sqlite"), "NO_COLOR": "1"}
    log = args.out / "console.log"
    rows: list[dict[str, Any]] = []
    prov = {**provenance(["benchmarks/cpu_first_hour.py", *argv]), "subreaper": subreaper}
    for name in names:
        for command in commands:
            runs = [RUNNERS[command](name, work, env, args.size, args.timeout_s, log) for _ in range(2)]
            row = {"problem": name, "command": command, "size": _verdict_size(runs[1]["stdout"]) or _verdict_size(runs[0]["stdout"])}
            for label, res in zip(("cold", "warm"), runs):
                row[label] = {k: v for k, v in res.items() if k != "stdout"}
            rows.append(row)
            print(f"{name:38s} {command:9s} cold {row['cold']['wall_s']:7.1f} s {row['cold']['peak_mib']:7.0f} MiB   "
                  f"warm {row['warm']['wall_s']:7.1f} s {row['warm']['peak_mib']:7.0f} MiB  {row['warm'].get('status')}", flush=True)
            result = {"provenance": prov, "targets": {"wall_s": TARGET_S, "peak_mib": TARGET_MIB}, "rows": rows}
            (args.out / "cpu_first_hour.json").write_text(json.dumps(result, indent=2) + "\n")  # after every row: a cut-off run keeps its rows
            (args.out / "cpu_first_hour.md").write_text(table(rows))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
