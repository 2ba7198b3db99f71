"""CPU figures the docs quote, measured again with provenance (issue 32: every figure in the docs
comes from benchmarks/results/ or names its commit).

    PYTHONPATH=src python3 benchmarks/doc_figures_cpu.py --out DIR [--runs 5] [--commit SHA]

The docs quote these as ratios against an anchor measured in the same run (STYLE 14: absolute
times come from the GPU machine only); the seconds are kept for the record. Sections, each over
--runs fresh processes (median and every run):
- `early_refusals`: the wall time of `kernelwright eval --device cpu --no-store` for a candidate
  with a syntax error, an empty model_new.py, and a ModelNew whose constructor cannot take the
  problem's init inputs (README.md, "Using it", and docs/judge.md, "eval"). The whole command is
  timed: the interpreter's start and kernelwright's imports (that the judge's process imports no
  torch for these is inferred from the times, not checked). Anchor: the same command judging the example's honest candidate (a full verdict),
  one per round after the round's refusals, after one untimed verdict; ratios per round.
- `dynamo_import`: `import torch._dynamo` in a fresh interpreter after `import torch`; anchor:
  that `import torch` in the same process (docs/judge.md, the fork server).
- `synth_fresh_worker`: `kernelwright synth --n N --device cpu --workers 1` (the rule composer's
  tasks: one worker reused for every job), and `synth --from` that run's folder (the same tasks,
  each job in a fresh worker; docs/synth.md). Per run, the compile stage's worker seconds per
  candidate both ways, the other stages' too, and the paired difference; the two runs' reports are
  copied to DIR. Each run's first job pays a fresh worker both ways, so N (--synth-n, default 12)
  dilutes that.

Writes DIR/doc_figures_cpu.json. Nothing here needs a GPU; run it on a quiet machine (the load
average before and after is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "cpu" / "elementwise_chain" / "problem.py"
HONEST = PROBLEM.parent  # the example's own candidate folder (model_new.py and kernels/)

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


def _tree_changed() -> bool | None:
    """Whether the working tree differs from the commit recorded (None outside a git checkout)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=ROOT)
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=_env(), timeout=300)
    return time.perf_counter() - t0, done


def _eval(cand: Path) -> list[str]:
    return [sys.executable, "-m", "kernelwright", "eval", str(PROBLEM), str(cand), "--device", "cpu", "--no-store"]


def early_refusals(runs: int) -> dict:
    secs: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    statuses: dict[str, set[str]] = {name: set() for name in CANDIDATES}
    reasons: dict[str, set[str]] = {name: set() for name in CANDIDATES}
    anchor: list[float] = []
    honest: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CANDIDATES.items():
            (Path(tmp) / name).mkdir()
            (Path(tmp) / name / "model_new.py").write_text(text)
        _timed(_eval(HONEST), Path(tmp))  # untimed: the first verdict also fills caches the later ones find
        for i in range(runs):  # each round: the three refusals, then the anchor
            for name in CANDIDATES:
                took, done = _timed(_eval(Path(tmp) / name), Path(tmp))
                first = (done.stdout.strip().splitlines() or [f"exit {done.returncode}: {done.stderr.strip()[-200:]}"])[0]
                statuses[name].add(first.split(":")[0])  # eval's first line: the status and its reason
                reasons[name].add(first.replace(tmp, "TMP")[:300])
                secs[name].append(round(took, 3))
                print(f"[early_refusals] {name} run {i + 1}/{runs}: {took:.2f} s, {first.split(':')[0]}", flush=True)
            took, done = _timed(_eval(HONEST), Path(tmp))
            anchor.append(round(took, 3))
            honest.add((done.stdout.strip().splitlines() or [f"exit {done.returncode}"])[0].split(":")[0])
            print(f"[early_refusals] anchor run {i + 1}/{runs}: {took:.2f} s", flush=True)
    med = statistics.median(anchor)
    rows = {}
    for name in CANDIDATES:
        ratios = [round(s / a, 4) for s, a in zip(secs[name], anchor)]  # each refusal against its own round's anchor
        rows[name] = {"median_s": round(statistics.median(secs[name]), 3), "runs_s": secs[name], "statuses": sorted(statuses[name]),
                      "reasons": sorted(reasons[name]), "ratio_to_full_verdict": {"median": statistics.median(ratios), "runs": ratios}}
    return {"refusals": rows, "anchor": {"what": "the same command judging the example's own candidate (a full verdict)", "median_s": round(med, 3),
                                         "runs_s": anchor, "statuses": sorted(honest)}}


def dynamo_import(runs: int) -> dict:
    code = ("import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); import torch._dynamo; "
            "print(t1 - t0, time.perf_counter() - t1)")
    secs, anchor = [], []
    for i in range(runs):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300, check=True)
        torch_s, dynamo_s = (float(x) for x in done.stdout.strip().splitlines()[-1].split())
        secs.append(round(dynamo_s, 3))
        anchor.append(round(torch_s, 3))
        print(f"[dynamo_import] run {i + 1}/{runs}: import torch {torch_s:.2f} s, then torch._dynamo {dynamo_s:.2f} s", flush=True)
    ratios = [round(d / a, 3) for d, a in zip(secs, anchor)]
    return {"median_s": round(statistics.median(secs), 3), "runs_s": secs,
            "anchor": {"what": "import torch, in the same process before it", "median_s": round(statistics.median(anchor), 3), "runs_s": anchor},
            "ratio_to_torch_import": {"median": statistics.median(ratios), "runs": ratios}}


def synth_fresh_worker(runs: int, n: int, out: Path) -> dict:
    """Per seed: an untimed composer run makes the task set; then the composer run again (same seed,
    same tasks, one reused worker) and `--from` the set (a fresh worker per job), in alternating
    order. Compared: each stage's worker seconds per candidate that entered it."""
    rows = []
    keep = out / "synth_reports"
    keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            common = ["--n", str(n), "--device", "cpu", "--workers", "1", "--json"]
            base = [sys.executable, "-m", "kernelwright", "synth"]
            made, shared, fresh = (Path(tmp) / f"{k}{i}" for k in ("made", "shared", "fresh"))
            cmds = {"made": [*base, "--seed", str(i), "--out", str(made), *common],
                    "shared": [*base, "--seed", str(i), "--out", str(shared), *common],
                    "fresh": [*base, "--seed", str(i), "--from", str(made), "--out", str(fresh), *common]}
            order = ["made", "shared", "fresh"] if i % 2 == 0 else ["made", "fresh", "shared"]
            reports = {}
            for key in order:
                _, done = _timed(cmds[key], Path(tmp))
                if done.returncode:
                    raise RuntimeError(f"synth ({key}) failed: {done.stderr[-600:]}")
                reports[key] = json.loads((Path(tmp) / f"{key}{i}" / "report.json").read_text())
                shutil.copy(Path(tmp) / f"{key}{i}" / "report.json", keep / f"seed{i}_{key}.json")
            stages = {}
            for kind in ("shared", "fresh"):
                for r in reports[kind].get("stages", []):
                    stages.setdefault(r["stage"], {})[kind] = round(r["worker_seconds"] / max(1, r["entered"]), 3)
            comp = stages.get("compile", {})
            row = {"seed": i, "order": order[1:], "candidates": {k: reports[k].get("n_candidates") for k in ("shared", "fresh")},
                   "accepted": {k: reports[k].get("n_accepted") for k in ("shared", "fresh")},
                   "worker_s_per_candidate": stages,
                   "compile_fresh_minus_shared_s": round(comp["fresh"] - comp["shared"], 3) if len(comp) == 2 else None,
                   "compile_fresh_over_shared": round(comp["fresh"] / comp["shared"], 2) if len(comp) == 2 and comp["shared"] else None}
            rows.append(row)
            print(f"[synth_fresh_worker] run {i + 1}/{runs}: {json.dumps(row)}", flush=True)
    diffs = [r["compile_fresh_minus_shared_s"] for r in rows if r["compile_fresh_minus_shared_s"] is not None]
    ratios = [r["compile_fresh_over_shared"] for r in rows if r["compile_fresh_over_shared"] is not None]
    return {"tasks_per_run": n, "runs": rows,
            "compile_fresh_minus_shared_s": {"median": statistics.median(diffs) if diffs else None, "runs": diffs},
            "compile_fresh_over_shared": {"median": statistics.median(ratios) if ratios else None, "runs": ratios}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for doc_figures_cpu.json")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per figure (default 5)")
    ap.add_argument("--synth-n", type=int, default=12, help="tasks per synth run (default 12)")
    ap.add_argument("--commit", default=os.environ.get("KERNELWRIGHT_COMMIT", "unknown"))
    args = ap.parse_args(argv)
    if args.runs < 1 or args.synth_n < 1:
        ap.error("--runs and --synth-n must be at least 1")
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "provenance": {"commit": _commit(args.commit), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "python": platform.python_version(), "torch": torch.__version__, "cores": os.cpu_count(),
                       "load_before": os.getloadavg()[0], "tree_changed": _tree_changed(),
                       "command": " ".join([Path(sys.executable).name, *sys.argv]), "pythonpath": os.environ.get("PYTHONPATH", "")},
        "early_refusals": early_refusals(args.runs),
        "dynamo_import": dynamo_import(args.runs),
        "synth_fresh_worker": synth_fresh_worker(args.runs, args.synth_n, out),
    }
    result["provenance"]["load_after"] = os.getloadavg()[0]
    path = out / "doc_figures_cpu.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
