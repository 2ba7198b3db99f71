"""Repeatability: every shipped example judged N times at the same commit, its candidate's time
each time, and the spread (max - min) / median per example (issue 32 asks for at most 2 %).

    PYTHONPATH=src python3 benchmarks/repeat_bench.py --out DIR [--device cuda] [--n 10] [--examples softmax,matmul]
        [--deadline-s 480] [--commit SHA]
    PYTHONPATH=src python3 benchmarks/repeat_bench.py --out /tmp/rep --device cpu --n 2   # a dry run of this script

Each verdict is a full `evaluate()` with the default policy (strict fp32, secret seeds, every
guard) but for the baselines, which are skipped: the spread asked for is the candidate's time's,
not a speedup's. Verdicts go round robin (one
of each example, then the next round), so drift over the run spreads over every example instead
of landing on the last one. The judge's children are new for every verdict; the process that
asks for them stays, as an agent's or a service's would.

DIR/repeat_bench.json is rewritten after every verdict, with provenance; a run cut by its deadline
(no verdict starts after --deadline-s; exit status 3) or killed keeps what it finished, and the
same command with --resume goes on from there, on the same commit, device, GPU and torch only. A
round that ended `infra_error`, or whose judgement raised, runs again then; the rows of both are
kept. Exit status 1: an example was not `correct` every time, or its spread is over 2 %. CPU times
are never claims: the cpu device is for trying the script.
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

import hostinfo  # beside this file: on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 0.02  # issue 32: the spread over 10 verdicts of each example at most 2 %
SAME = ("commit", "device", "gpu", "torch")  # what a resumed run must share with the file's
AGAIN = ("infra_error", "raised")  # a round that ended so is run again on --resume
STOPPED = 3  # the exit status of a run its deadline cut short (the rest: --resume)


def _says(p: dict[str, Any]) -> str:
    return f"{p['commit']} on {p['device']} ({p['gpu'] or 'no GPU'}, torch {p['torch']})"


def _git(*args: str) -> str | None:
    try:
        p = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    except OSError:
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _commit(given: str) -> str:
    """The commit given, else HEAD's."""
    return given if given != "unknown" else (_git("rev-parse", "--short", "HEAD") or given)


def _tree_dirty() -> bool | None:
    """Whether tracked files of the code being measured (src/, examples/, benchmarks/) differ from
    HEAD, whatever commit was given (a GPU machine runs a copy of the working tree); None without git."""
    out = _git("status", "--porcelain", "--untracked-files=no", "--", "src", "examples", "benchmarks")
    return None if out is None else bool(out)


def _provenance(a: argparse.Namespace) -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(0) if a.device == "cuda" and torch.cuda.is_available() else None
    return {"commit": _commit(a.commit), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": a.device, "gpu": gpu,
            "torch": torch.__version__, "python": platform.python_version(), "command": " ".join(sys.argv), "n": a.n,
            "tree_dirty": _tree_dirty(), "host": hostinfo.host()}


def examples(device: str, only: str) -> list[str]:
    """The shipped examples of DEVICE (examples/DEVICE/NAME with problem.py and model_new.py), or the ones named."""
    base = ROOT / "examples" / device
    found = sorted(p.name for p in base.iterdir() if (p / "problem.py").is_file() and (p / "model_new.py").is_file())
    if not only:
        return found
    asked = [n for n in only.split(",") if n]
    unknown = [n for n in asked if n not in found]
    if unknown:
        raise SystemExit(f"no example {', '.join(unknown)} in {base} (there are: {', '.join(found)})")
    return asked


def summarise(rows: list[dict[str, Any]], names: list[str], n: int) -> dict[str, dict[str, Any]]:
    """Per example: its verdicts' statuses, the candidate's times, their median and spread, and
    whether the spread is within LIMIT over the N verdicts asked for (None until all N are timed)."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        mine = [r for r in rows if r["example"] == name]
        times = [r["runtime_ms"] for r in mine if r.get("status") == "correct" and r.get("runtime_ms")]
        s: dict[str, Any] = {"verdicts": len(mine), "statuses": sorted({r.get("status") or "none" for r in mine}), "runtime_ms": times}
        if times:
            med = statistics.median(times)
            s.update(median_ms=med, spread=(max(times) - min(times)) / med, min_ms=min(times), max_ms=max(times))
        s["within_limit"] = (s["spread"] <= LIMIT) if len(times) >= n and "spread" in s else None
        out[name] = s
    return out


def _row(name: str, round_: int, v: Any, wall_s: float) -> dict[str, Any]:
    d = v.to_dict() if hasattr(v, "to_dict") else dict(v)
    timing = d.get("timing") or {}
    fired = [g["name"] for g in d.get("guards") or [] if g.get("fired")]
    return {"example": name, "round": round_, "status": d.get("status"), "runtime_ms": d.get("runtime_ms"), "wall_s": round(wall_s, 3),
            "n": timing.get("n"), "iqr_ms": timing.get("iqr_ms"), "overhead_ms": timing.get("overhead_ms"),
            "raw_median_ms": timing.get("raw_median_ms"), "guards_fired": fired, "workers": d.get("workers"),
            "candidate_hash": (d.get("candidate") or {}).get("hash"), "log": (d.get("log") or "")[:300]}


def run(a: argparse.Namespace) -> dict[str, Any]:
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.policy import Policy

    names = examples(a.device, a.examples)
    path = a.out / "repeat_bench.json"
    doc: dict[str, Any] = {"provenance": _provenance(a), "runs": [], "rows": []}
    if path.exists() and not a.resume:
        raise SystemExit(f"{path} exists: pass --resume to go on from it, or give another --out")
    if a.resume and path.exists():
        old = json.loads(path.read_text())
        mine = {k: doc["provenance"].get(k) for k in SAME}
        theirs = {k: old["provenance"].get(k) for k in SAME}
        if mine != theirs:
            raise SystemExit(f"{path} is from {_says(theirs)}, not this run's {_says(mine)}: give another --out")
        doc["rows"], doc["runs"] = old["rows"], old.get("runs", [old["provenance"]])
    doc["runs"].append(doc["provenance"])
    policy = Policy(baselines="skip")
    started, stop = time.perf_counter(), None
    for k in range(1, a.n + 1):
        for name in names:
            if any(r["example"] == name and r["round"] == k and r.get("status") not in AGAIN for r in doc["rows"]):
                continue  # done; a round that ended infra_error or raised runs again, its row kept beside the new one
            if time.perf_counter() - started > a.deadline_s:
                stop = f"deadline: no verdict started after {a.deadline_s:.0f} s"
                break
            ex = ROOT / "examples" / a.device / name
            t0 = time.perf_counter()
            try:
                row = _row(name, k, evaluate(ex / "problem.py", ex, policy, device=a.device), time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - a malformed example or setting must not stop the others
                row = {"example": name, "round": k, "status": "raised", "runtime_ms": None, "wall_s": round(time.perf_counter() - t0, 3),
                       "log": f"{type(exc).__name__}: {exc}"[:300]}
            doc["rows"].append(row)
            doc["summary"] = summarise(doc["rows"], names, a.n)
            _write(path, doc)
            print(f"[{time.perf_counter() - started:7.1f} s] {name} round {k}: {row['status']} {row['runtime_ms']} ms "
                  f"({row['wall_s']:.1f} s)", flush=True)
        if stop:
            break
    doc["summary"], doc["stopped"] = summarise(doc["rows"], names, a.n), stop
    _write(path, doc)
    (a.out / "repeat_bench.md").write_text(table(doc))
    return doc


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)  # a kill mid-write leaves the previous file whole


def table(doc: dict[str, Any]) -> str:
    p = doc["provenance"]
    lines = [f"# Repeatability ({p['device']}, {p['gpu'] or 'no GPU'}, {p['commit']}, {p['date']})", "",
             f"`{p['command']}`", "", "| example | verdicts | statuses | median ms | min ms | max ms | spread | within 2 % |",
             "|---|---|---|---|---|---|---|---|"]
    for name, s in doc["summary"].items():
        f = (lambda k: f"{s[k]:.4f}" if k in s else "-")
        spread = f"{100 * s['spread']:.2f} %" if "spread" in s else "-"
        within = {True: "yes", False: "no", None: "not all timed"}[s["within_limit"]]
        lines.append(f"| {name} | {s['verdicts']} | {', '.join(s['statuses'])} | {f('median_ms')} | {f('min_ms')} | {f('max_ms')} | {spread} | {within} |")
    if doc.get("stopped"):
        lines += ["", f"Stopped early ({doc['stopped']}); run the same command with --resume."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--n", type=int, default=10, help="verdicts per example (default 10)")
    ap.add_argument("--examples", default="", help="comma-separated names under examples/DEVICE (default: all)")
    ap.add_argument("--deadline-s", type=float, default=480.0, help="start no verdict after this many seconds")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--resume", action="store_true", help="keep DIR/repeat_bench.json's verdicts and run the rest")
    a = ap.parse_args(argv)
    if a.n < 2:
        ap.error("--n must be at least 2: a spread needs two times")
    a.out.mkdir(parents=True, exist_ok=True)
    doc = run(a)
    sys.stdout.write(table(doc))
    bad = [n for n, s in doc["summary"].items() if s["within_limit"] is False or (s["statuses"] and s["statuses"] != ["correct"])]
    return 1 if bad else STOPPED if doc.get("stopped") else 0


if __name__ == "__main__":
    sys.exit(main())
