"""What step precision adds to a warm verdict: the shipped examples judged correctness-only in one
process, three times each with the step on and three times with it off (issue 27, item 7).

    PYTHONPATH=src python3 benchmarks/precision_cost.py --out DIR [--device cpu] [--rounds 3]

Writes DIR/precision_cost.json: per example the walls, their medians, and the step's own note
(which gives the float64 run's time in the reference child).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.policy import Policy

    rows: dict[str, dict] = {}
    folder = ROOT / "examples" / ("cuda" if args.device == "cuda" else "cpu")
    for d in sorted(p for p in folder.iterdir() if (p / "problem.py").is_file()):
        for label, off in (("on", frozenset()), ("off", frozenset({"precision"}))):
            walls = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                v = evaluate(d / "problem.py", d, Policy(time_candidate=False, disabled_steps=off), device=args.device)
                walls.append(round(time.perf_counter() - t0, 3))
            step = next(s.reason for s in v.steps if s.name == "precision")
            rows.setdefault(d.name, {})[label] = {"status": v.status.value, "walls_s": walls, "median_s": statistics.median(walls), "step": step}
        print(d.name, {k: (r["status"], r["median_s"]) for k, r in rows[d.name].items()}, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "precision_cost.json").write_text(json.dumps({"device": args.device, "rounds": args.rounds, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
