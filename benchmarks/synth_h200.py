"""Synthesised tasks filtered again on the GPU machine, and the runtime proxy calibrated, in one call.

    PYTHONPATH=src python3 benchmarks/synth_h200.py --tasks benchmarks/results/synth_cpu_s0/tasks.jsonl \
        --n 200 --workers 10 --budget-s 540 --commit SHA --out "$OUT" [--resume-from CANDIDATES.jsonl]

1. Takes the first N tasks of a CPU synthesis (`tasks.jsonl`) into a fixed scratch folder.
2. Runs `kernelwright synth --from THAT --device cuda`: at full size, workers in parallel run the
   judge's load, the determinism checks, inductor against eager and the degeneracy gate; then one
   worker, with the GPU to itself, times each survivor's eager forward (the judge's timing function)
   and holds it to the 1-100 ms window. The run stops at --budget-s; a second call with
   --resume-from (the candidates.jsonl the first call brought back) finishes it.
3. Fits log(H200 eager ms) = a + b log(raw proxy ms) over the timed tasks and reports Spearman's rank
   correlation of the proxy with the measured times (`calibration.json`).

Files in --out: candidates.jsonl, report.json, report.md (when the run finished), calibration.json,
env.json, console.log.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = Path("/tmp/kw-synth-h200")  # fixed, so a resume finds the same --from path


def environment(commit: str) -> dict:
    import torch

    return {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "torch": torch.__version__,
            "cuda": torch.version.cuda, "driver": _driver(), "commit": commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpus": os.cpu_count(), "command": " ".join(sys.argv)}


def _driver() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def prepare(tasks: Path, n: int, resume_from: Path | None) -> tuple[Path, Path]:
    given, run = SCRATCH / "given", SCRATCH / "run"
    if SCRATCH.exists() and resume_from is None:
        shutil.rmtree(SCRATCH)
    given.mkdir(parents=True, exist_ok=True)
    lines = tasks.read_text().splitlines()[:n]
    (given / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    if resume_from is not None:
        run.mkdir(parents=True, exist_ok=True)
        shutil.copy(resume_from, run / "candidates.jsonl")
    return given, run


def synth(given: Path, run: Path, n: int, workers: int, budget_s: float, resume: bool, log: Path, device: str) -> int:
    cmd = [sys.executable, "-m", "kernelwright", "synth", "--from", str(given), "--n", str(n), "--device", device,
           "--workers", str(workers), "--out", str(run), "--timeout-s", "300"] + (["--resume"] if resume else [])
    if resume:
        # the manifest is rewritten from the same settings, so the resume check passes
        from kernelwright.synth.pipeline import KIND, SCHEMA_VERSION, SynthConfig

        cfg = SynthConfig(n=n, out=run, device=device, workers=workers, source=given, timeout_s=300)
        (run / "manifest.json").write_text(json.dumps({"kind": KIND, "schema_version": SCHEMA_VERSION, "identity": cfg.identity()}))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TORCHINDUCTOR_COMPILE_THREADS="1")
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=budget_s).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\n[stopped at the budget of {budget_s:g} s; resume with --resume-from candidates.jsonl]\n")
            return 124


def calibrate(candidates: Path) -> dict:
    from kernelwright.synth.cost import fit, spearman

    timed = []
    for line in candidates.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        t = r.get("task") or {}
        if r.get("phase") == "time" and t.get("measured_ms") and t.get("proxy_raw_ms"):
            timed.append(t)
    if len(timed) < 3:
        return {"n": len(timed), "error": "fewer than 3 tasks timed"}
    raw = [t["proxy_raw_ms"] for t in timed]
    measured = [t["measured_ms"] for t in timed]
    fitted = fit(raw, measured)
    in_window = sum(1 for m in measured if 1.0 <= m <= 100.0)
    ratio = sorted(m / t["proxy_ms"] for m, t in zip(measured, timed) if t.get("proxy_ms"))
    return {**fitted, "spearman_cpu_proxy": spearman([t["proxy_ms"] for t in timed], measured), "n_timed": len(timed),
            "in_window": in_window, "measured_over_cpu_proxy": {"p10": ratio[len(ratio) // 10], "median": ratio[len(ratio) // 2],
                                                                  "p90": ratio[9 * len(ratio) // 10]}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=Path, required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--resume-from", type=Path, default=None)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script's plumbing (small-scale checks, no timing)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "src"))
    (args.out / "env.json").write_text(json.dumps(environment(args.commit), indent=1))
    given, run = prepare(args.tasks, args.n, args.resume_from)
    t0 = time.time()
    rc = synth(given, run, args.n, args.workers, args.budget_s, args.resume_from is not None, args.out / "console.log", args.device)
    for name in ("candidates.jsonl", "report.json", "report.md"):
        if (run / name).exists():
            shutil.copy(run / name, args.out / name)
    cal = calibrate(run / "candidates.jsonl") if (run / "candidates.jsonl").exists() else {"error": "no candidates"}
    cal.update(fitted_on=f"benchmarks/synth_h200.py, commit {args.commit}, {time.strftime('%Y-%m-%d')}", rc=rc, wall_s=round(time.time() - t0, 1))
    (args.out / "calibration.json").write_text(json.dumps(cal, indent=1))
    print(json.dumps(cal, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
