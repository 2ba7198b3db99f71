"""CPU figures the docs quote, measured again with provenance (issue 32: every figure in the docs
comes from benchmarks/results/ or names its commit).

    PYTHONPATH=src python3 benchmarks/doc_figures_cpu.py --out DIR [--runs 5] [--commit SHA]

Sections, each the median (and all runs) of --runs fresh processes:
- `early_refusals`: the wall time of `kernelwright eval --device cpu --no-store` for a candidate
  with a syntax error, an empty model_new.py, and a ModelNew whose constructor cannot take the
  problem's init inputs (README.md, "Using it", and docs/judge.md, "eval"). The whole command is
  timed, the interpreter's start and torch's import included, and the status is recorded.
- `dynamo_import`: `import torch._dynamo` in a fresh interpreter after `import torch`
  (docs/judge.md, the fork server).
- `synth_fresh_worker`: `kernelwright synth --n 6 --device cpu --workers 1` (the rule composer's
  tasks: workers are reused), then `synth --from` that run's folder, the same 6 tasks, each job in
  a fresh worker (docs/synth.md). Per run: each command's wall time, the reports' worker seconds per
  candidate of each stage, and, where both runs examined the same number of candidates, the
  difference of the reports' wall times per task.

Writes DIR/doc_figures_cpu.json. Nothing here needs a GPU; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "cpu" / "elementwise_chain" / "problem.py"

CANDIDATES = {
    "syntax_error": "import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n",
    "empty_file": "",
    "wrong_constructor": ("import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
                          "    def __init__(self, a, b, c, d, e, f, g):\n        super().__init__()\n\n"
                          "    def forward(self, x):\n        return x\n"),
}


def _commit(given: str) -> str:
    if given != "unknown":
        return given
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() or given


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=_env(), timeout=300)
    return time.perf_counter() - t0, done


def early_refusals(runs: int) -> dict:
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CANDIDATES.items():
            cand = Path(tmp) / name
            cand.mkdir()
            (cand / "model_new.py").write_text(text)
            secs, statuses, reasons = [], [], set()
            for i in range(runs):
                took, done = _timed([sys.executable, "-m", "kernelwright", "eval", str(PROBLEM), str(cand), "--device", "cpu",
                                     "--no-store"], Path(tmp))
                first = (done.stdout.strip().splitlines() or [f"exit {done.returncode}: {done.stderr.strip()[-200:]}"])[0]
                statuses.append(first.split(":")[0])  # eval's first line: the status and its reason
                reasons.add(first.replace(tmp, "TMP")[:300])
                secs.append(round(took, 3))
                print(f"[early_refusals] {name} run {i + 1}/{runs}: {took:.2f} s, {statuses[-1]}", flush=True)
            rows[name] = {"median_s": round(statistics.median(secs), 3), "runs_s": secs, "statuses": sorted(set(statuses)),
                          "reasons": sorted(reasons)}
    return rows


def dynamo_import(runs: int) -> dict:
    code = "import time, torch; t = time.perf_counter(); import torch._dynamo; print(time.perf_counter() - t)"
    secs = []
    for i in range(runs):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300, check=True)
        secs.append(round(float(done.stdout.strip().splitlines()[-1]), 3))
        print(f"[dynamo_import] run {i + 1}/{runs}: {secs[-1]:.2f} s", flush=True)
    return {"median_s": round(statistics.median(secs), 3), "runs_s": secs}


def synth_fresh_worker(runs: int) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            shared, fresh = Path(tmp) / f"shared{i}", Path(tmp) / f"fresh{i}"
            common = ["--n", "6", "--device", "cpu", "--workers", "1", "--json"]
            took_s, done_s = _timed([sys.executable, "-m", "kernelwright", "synth", "--seed", str(i), "--out", str(shared), *common], Path(tmp))
            took_f, done_f = _timed([sys.executable, "-m", "kernelwright", "synth", "--from", str(shared), "--out", str(fresh), *common], Path(tmp))
            if done_s.returncode or done_f.returncode:
                raise RuntimeError(f"synth failed: {done_s.stderr[-400:]} {done_f.stderr[-400:]}")
            rep_s, rep_f = (json.loads((d / "report.json").read_text()) for d in (shared, fresh))
            row = {"seed": i, "shared_wall_s": round(took_s, 3), "fresh_wall_s": round(took_f, 3),
                   "shared_report_wall_s": rep_s.get("wall_s"), "fresh_report_wall_s": rep_f.get("wall_s"),
                   "shared_candidates": rep_s.get("n_candidates"), "fresh_candidates": rep_f.get("n_candidates"),
                   "accepted": [rep_s.get("n_accepted"), rep_f.get("n_accepted")]}
            per = {r["stage"]: [r["worker_seconds"], r["entered"]] for r in rep_s.get("stages", [])}
            row["worker_s_per_entered"] = {r["stage"]: [round(per[r["stage"]][0] / max(1, per[r["stage"]][1]), 3),
                                                        round(r["worker_seconds"] / max(1, r["entered"]), 3)]
                                           for r in rep_f.get("stages", []) if r["stage"] in per}  # [shared, fresh]
            if row["shared_candidates"] == row["fresh_candidates"]:  # the same work both ways: the wall time compares
                row["fresh_minus_shared_per_task_s"] = round((row["fresh_report_wall_s"] - row["shared_report_wall_s"]) / row["fresh_candidates"], 3)
            rows.append(row)
            print(f"[synth_fresh_worker] run {i + 1}/{runs}: {json.dumps(row)}", flush=True)
    deltas = [r["fresh_minus_shared_per_task_s"] for r in rows if "fresh_minus_shared_per_task_s" in r]
    return {"runs": rows, "median_fresh_minus_shared_per_task_s": round(statistics.median(deltas), 3) if deltas else None,
            "runs_compared": len(deltas)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for doc_figures_cpu.json")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per figure (default 5)")
    ap.add_argument("--commit", default=os.environ.get("KERNELWRIGHT_COMMIT", "unknown"))
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "provenance": {"commit": _commit(args.commit), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "python": platform.python_version(), "torch": torch.__version__, "cores": os.cpu_count(),
                       "load_before": os.getloadavg()[0], "command": " ".join(sys.argv)},
        "early_refusals": early_refusals(args.runs),
        "dynamo_import": dynamo_import(args.runs),
        "synth_fresh_worker": synth_fresh_worker(args.runs),
    }
    result["provenance"]["load_after"] = os.getloadavg()[0]
    path = out / "doc_figures_cpu.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
