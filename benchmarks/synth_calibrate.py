"""Refit the synthesis runtime proxy's calibration from H200 times already measured, on the CPU.

    PYTHONPATH=src python3 benchmarks/synth_calibrate.py \
        --timed benchmarks/results/synth_h200/candidates.jsonl benchmarks/results/synth_h200/extras.jsonl \
        --holdout benchmarks/results/synth_h200_s1_5f99627/candidates.jsonl --commit SHA --out DIR [--ship]

The files are what `benchmarks/synth_h200.py` brought back from the GPU machine: each timed task's
source and its measured eager time. The proxy's operator classes are recomputed here on meta tensors,
so a new class split (synth/cost.py) is refitted on the old measurements without a GPU. Writes
DIR/calibration.json:

- the per-class fit on --timed, scored in sample, by two-fold cross-validation, and on --holdout
  (tasks it was not fitted on, such as a fresh seed's set);
- `shipped`: the same fit on --timed and --holdout together. With --ship, that fit is written to
  src/kernelwright/synth/calibration.json, the file every synthesis run sizes and filters with.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    from synth_h200 import calibrate, timed_tasks

    ap = argparse.ArgumentParser()
    ap.add_argument("--timed", type=Path, nargs="+", required=True, help="candidates.jsonl / extras.jsonl files with H200 times")
    ap.add_argument("--holdout", type=Path, nargs="*", default=[], help="files whose tasks score the fit (not fitted on)")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ship", action="store_true", help="write the fit on all the tasks to src/kernelwright/synth/calibration.json")
    args = ap.parse_args()
    fitted, held = timed_tasks(args.timed), timed_tasks(args.holdout)
    report = calibrate(fitted, held or None)
    everything = calibrate(fitted + held) if held else report
    report["shipped"] = {k: everything[k] for k in ("coefficients", "per_class_in_sample", "per_class_two_fold", "n_timed")}
    report.update(files={"timed": [str(p) for p in args.timed], "holdout": [str(p) for p in args.holdout]}, commit=args.commit,
                  date=time.strftime("%Y-%m-%d"), command=" ".join(sys.argv))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration.json").write_text(json.dumps(report, indent=1))
    if args.ship:
        from kernelwright.synth.cost import PART_NAMES

        unpriced = [k for k in PART_NAMES if not everything["coefficients"].get(k)]
        if unpriced:
            raise SystemExit(f"not shipped: the fit gives no coefficient to {unpriced} (no task has them, or least squares dropped them)")
        cv = everything["per_class_two_fold"]
        shipped = {"intercept": everything["intercept"], "slope": everything["slope"], "coefficients": everything["coefficients"],
                   "fitted_on": f"H200 eager times of {everything['n_timed']} synthesised tasks ({', '.join(str(p) for p in args.timed + args.holdout)}), "
                                f"refitted by benchmarks/synth_calibrate.py at {args.commit}, {report['date']}; see benchmarks/results/synth_h200.md",
                   "spearman": everything["per_class_in_sample"]["spearman"], "spearman_two_fold": [f["spearman"] for f in cv],
                   "median_rel_error_two_fold": [f["median_rel_error"] for f in cv], "n": everything["n_timed"]}
        (ROOT / "src" / "kernelwright" / "synth" / "calibration.json").write_text(json.dumps(shipped, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("coefficients", "per_class_in_sample", "per_class_two_fold", "holdout", "shipped") if k in report}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
