"""Synthesised tasks filtered again on the GPU machine, and the runtime proxy calibrated, in one call.

    PYTHONPATH=src python3 benchmarks/synth_h200.py --tasks benchmarks/results/synth_cpu_s0/tasks.jsonl \
        --n 200 --workers 10 --budget-s 540 --commit SHA --out "$OUT" [--resume-from CANDIDATES.jsonl]
    PYTHONPATH=src python3 benchmarks/synth_h200.py --seed 1 --n 100 --workers 5 --budget-s 520 --commit SHA --out "$OUT"

1. Takes the first N tasks of a CPU synthesis (`tasks.jsonl`) into a fixed scratch folder.
2. Runs `kernelwright synth --from THAT --device cuda`: at full size, workers in parallel run the
   judge's load, the determinism checks, inductor against eager and the degeneracy gate; then one
   worker, with the GPU to itself, times each survivor's eager forward (the judge's timing function)
   and holds it to the 1-100 ms window. The run stops at --budget-s; a second call with
   --resume-from (the candidates.jsonl the first call brought back) finishes it.
3. Calibrates the runtime proxy on the timed tasks (`calibration.json`): log(H200 ms) = a + b log(raw
   proxy), and per-operator-class coefficients (convolutions, matrix products, memory-bound work,
   launches); Spearman's rank correlation of each with the measured times, and the per-class fit's
   two-fold cross-validated error.

Without --tasks, step 2 composes a fresh set on the GPU instead (`kernelwright synth --seed S --device
cuda`: sizing by the shipped calibration, then the same checks and timing), and the shipped
calibration is scored out of sample on its timed tasks (`out_of_sample` in calibration.json): the
proxy each task was sized with against the H200's measurement, and whether both put it in the window.

With --extras (tasks the CPU proxy put outside the window), the budget's last --extras-s seconds time
those too, without checks, so the calibration sees times beyond the window.

Files in --out: candidates.jsonl, report.json, report.md (when the run finished), extras.jsonl,
calibration.json, env.json, console.log.
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


def prepare(tasks: Path | None, n: int, resume_from: Path | None) -> tuple[Path | None, Path]:
    given, run = SCRATCH / "given", SCRATCH / "run"
    if SCRATCH.exists() and resume_from is None:
        shutil.rmtree(SCRATCH)
    SCRATCH.mkdir(parents=True, exist_ok=True)
    if tasks is None:
        given = None  # a fresh set, composed on the GPU
    else:
        given.mkdir(parents=True, exist_ok=True)
        lines = tasks.read_text().splitlines()[:n]
        (given / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    if resume_from is not None:
        run.mkdir(parents=True, exist_ok=True)
        shutil.copy(resume_from, run / "candidates.jsonl")
    return given, run


def synth(given: Path | None, seed: int, run: Path, n: int, workers: int, budget_s: float, resume: bool, log: Path, device: str,
          commit: str) -> int:
    source = ["--from", str(given)] if given is not None else ["--seed", str(seed)]
    cmd = [sys.executable, "-m", "kernelwright", "synth", *source, "--n", str(n), "--device", device,
           "--workers", str(workers), "--out", str(run), "--timeout-s", "300"] + (["--resume"] if resume else [])
    if resume:
        # the manifest is rewritten from the same settings, so the resume check passes
        from kernelwright.synth.pipeline import KIND, SCHEMA_VERSION, SynthConfig

        cfg = SynthConfig(n=n, out=run, device=device, workers=workers, source=given, seed=0 if given else seed, timeout_s=300)
        (run / "manifest.json").write_text(json.dumps({"kind": KIND, "schema_version": SCHEMA_VERSION, "identity": cfg.identity()}))
    # the machine's .git may be older than the tree it holds: the report names the commit given
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TORCHINDUCTOR_COMPILE_THREADS="1", KERNELWRIGHT_COMMIT=commit)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=budget_s).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\n[stopped at the budget of {budget_s:g} s; resume with --resume-from candidates.jsonl]\n")
            return 124


def timed_tasks(paths: list[Path]) -> list[dict]:
    """The tasks an H200 timed, from candidates.jsonl / extras.jsonl files (a line cut short is skipped)."""
    timed = []
    for path in paths:
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            t = r.get("task") or {}
            if r.get("phase") == "time" and t.get("measured_ms") and t.get("proxy_raw_ms"):
                timed.append(t)
    return timed


def _scored(coef: dict, parts: list[dict], measured: list[float]) -> dict:
    from kernelwright.synth.cost import coefficient, spearman

    window = (1.0, 100.0)
    pred = [sum(coefficient(coef, k) * v for k, v in p.items()) for p in parts]
    rel = sorted(abs(q / m - 1) for q, m in zip(pred, measured))
    agree = sum(1 for q, m in zip(pred, measured) if (window[0] <= q <= window[1]) == (window[0] <= m <= window[1]))
    return {"n": len(parts), "spearman": spearman(pred, measured), "median_rel_error": rel[len(rel) // 2],
            "p90_rel_error": rel[9 * len(rel) // 10], "window_agreement": agree}


def calibrate(timed: list[dict], holdout: list[dict] | None = None) -> dict:
    """Both calibrations over the timed tasks: log-linear on the raw proxy, and per operator class
    (cost.fit_parts, classes recomputed on meta tensors here, so a new class split refits old
    measurements), each with its rank correlation; the per-class fit's two-fold cross-validated
    error (fitted on one half, scored on the other) and, with `holdout`, its score on those tasks."""
    from kernelwright.synth.cost import fit, fit_parts, spearman
    from kernelwright.synth.filters import _meta_cost

    if len(timed) < 6:
        return {"n": len(timed), "error": "fewer than 6 tasks timed"}
    raw = [t["proxy_raw_ms"] for t in timed]
    measured = [t["measured_ms"] for t in timed]
    parts = [dict(_meta_cost(t["source"], None).parts) for t in timed]
    loglin = fit(raw, measured)
    coefficients = fit_parts(parts, measured)
    even, odd = list(range(0, len(timed), 2)), list(range(1, len(timed), 2))
    cv = [_scored(fit_parts([parts[i] for i in a], [measured[i] for i in a]), [parts[i] for i in b], [measured[i] for i in b])
          for a, b in ((even, odd), (odd, even))]
    out = {"intercept": loglin["intercept"], "slope": loglin["slope"], "loglinear": loglin, "coefficients": coefficients,
           "per_class_in_sample": _scored(coefficients, parts, measured), "per_class_two_fold": cv,
           "spearman_raw_proxy": spearman(raw, measured), "spearman_cpu_proxy": spearman([t["proxy_ms"] for t in timed], measured),
           "n_timed": len(timed), "in_window": sum(1 for m in measured if 1.0 <= m <= 100.0),
           "measured_ms": {"min": min(measured), "median": sorted(measured)[len(measured) // 2], "max": max(measured)}}
    if holdout:
        out["holdout"] = _scored(coefficients, [dict(_meta_cost(t["source"], None).parts) for t in holdout], [t["measured_ms"] for t in holdout])
    return out


def out_of_sample(candidates: Path) -> dict:
    """The shipped calibration scored on tasks it was not fitted on: the calibrated proxy each timed
    task carries (computed by the worker with the shipped calibration.json) against the H200's time."""
    from kernelwright.synth.cost import load_calibration, spearman

    lo, hi = 1.0, 100.0
    pairs = [(t["proxy_ms"], t["measured_ms"]) for t in timed_tasks([candidates]) if t.get("proxy_ms")]
    if len(pairs) < 6:
        return {"n": len(pairs), "error": "fewer than 6 tasks timed"}
    proxy, measured = zip(*pairs)
    rel = sorted(abs(p / m - 1) for p, m in pairs)
    inside = [lo <= m <= hi for m in measured]
    return {"calibration": load_calibration().get("fitted_on"), "n": len(pairs), "spearman": spearman(list(proxy), list(measured)),
            "median_rel_error": rel[len(rel) // 2], "p90_rel_error": rel[9 * len(rel) // 10],
            "measured_in_window": sum(inside), "proxy_in_window": sum(lo <= p <= hi for p in proxy),
            "window_agreement": sum(1 for (p, m), i in zip(pairs, inside) if (lo <= p <= hi) == i),
            "median_measured_over_proxy": sorted(m / p for p, m in pairs)[len(pairs) // 2]}


def time_extras(extras: Path, deadline: float, out: Path) -> int:
    """Time tasks the CPU's proxy put outside the window (no checks; one worker, the GPU alone), so the
    calibration sees times beyond the window too; stops at the deadline. Returns how many were timed."""
    from kernelwright.synth.cost import load_calibration
    from kernelwright.synth.pool import Pool

    tasks = [json.loads(line) for line in extras.read_text().splitlines() if line.strip()]
    context = {"device": "cuda", "calibration": load_calibration(), "against": {}, "threshold": 0.9, "atol": 1e-4, "rtol": 1e-4,
               "backend": "inductor", "timed": True}
    jobs = ({"index": i, "phase": "time", "window": [1.0, 100.0], "source": t["source"], "task": t} for i, t in enumerate(tasks))
    pool = Pool(1, context, timeout_s=60, fresh=False)  # the rule composer's tasks from this repository's CPU run: one worker for all
    n = 0
    try:
        with out.open("w") as f:
            for result in pool.run(jobs):
                f.write(json.dumps(result) + "\n")
                f.flush()
                n += 1
                if time.time() > deadline:
                    break
    finally:
        pool.close()
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=Path, default=None, help="a CPU synthesis's tasks.jsonl to filter again (default: compose afresh with --seed)")
    ap.add_argument("--seed", type=int, default=1, help="without --tasks: the seed of the set composed on the GPU")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--resume-from", type=Path, default=None)
    ap.add_argument("--extras", type=Path, default=None, help="tasks outside the window by the CPU proxy, timed with what is left of the budget")
    ap.add_argument("--extras-s", type=float, default=100, help="seconds of the budget kept for --extras")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script's plumbing (small-scale checks, no timing)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "src"))
    (args.out / "env.json").write_text(json.dumps(environment(args.commit), indent=1))
    given, run = prepare(args.tasks, args.n, args.resume_from)
    t0 = time.time()
    main_budget = args.budget_s - (args.extras_s if args.extras else 0)
    rc = synth(given, args.seed, run, args.n, args.workers, main_budget, args.resume_from is not None, args.out / "console.log", args.device,
               args.commit)
    for name in ("candidates.jsonl", "report.json", "report.md"):
        if (run / name).exists():
            shutil.copy(run / name, args.out / name)
    n_extra = 0
    if args.extras and args.device == "cuda":
        n_extra = time_extras(args.extras, t0 + args.budget_s, args.out / "extras.jsonl")
    cal = calibrate(timed_tasks([p for p in (run / "candidates.jsonl", args.out / "extras.jsonl") if p.exists()]))
    cal["n_extras_timed"] = n_extra
    if given is None and (run / "candidates.jsonl").exists():
        cal["out_of_sample"] = out_of_sample(run / "candidates.jsonl")
    cal.update(fitted_on=f"benchmarks/synth_h200.py, commit {args.commit}, {time.strftime('%Y-%m-%d')}", rc=rc, wall_s=round(time.time() - t0, 1))
    (args.out / "calibration.json").write_text(json.dumps(cal, indent=1))
    print(json.dumps(cal, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
