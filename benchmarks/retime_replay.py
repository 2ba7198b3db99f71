"""What timing a window again would do to the 2 % row, replayed from recorded windows without a GPU.

warm_bench's concurrent section keeps, for each of its candidates, the per-call record of the
window its verdict priced, alone and beside other verdicts (`concurrent_samples.json`). This reads
such files, prices every window as the judge does (charge_replay), and then, for a trigger, redraws
each window the trigger picks: the charge (and the trigger's reading) from a window of the same
problem chosen at random among the recorded ones, the stream time kept with 0.2 % of noise, and the
price held no lower than the first window's stream time (phases_timing._floor_from_first_window). A
fresh candidate child at the same moment is taken as an independent draw: an assumption, which the
H200 has to confirm. Prints, per trigger, the pairs of one candidate's verdicts more than 2 % apart
(summed over the files) and the share of windows timed again.

    PYTHONPATH=src python3 benchmarks/retime_replay.py benchmarks/results/warm_h200_*_concurrent_samples.json

Triggers: "none"; "instrument" (the candidate child's own calls of the judge's kernels more than
10 us above the capped base: the judge up to f8dca61); "charge>X" (the charge moved the median by
more than X %: the judge since; X = 1).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import charge_replay  # noqa: E402


def windows(paths: list[Path]) -> dict[tuple[str, str, str], dict[str, tuple[float, float, float]]]:
    """{(file, problem, variant): {"alone"|"concurrent": (stream ms, charge %, instrument us)}}."""
    pairs: dict[tuple[str, str, str], dict[str, tuple[float, float, float]]] = collections.defaultdict(dict)
    for path in paths:
        for label, rec in charge_replay.records(json.loads(path.read_text())):
            m = re.match(r"variants/(\w+)/(v\d+) \((alone|concurrent)", label)
            r = charge_replay.replay(rec).get("candidate")
            if not m or not r or r.get("base_us") is None:
                continue
            own = (r.get("held_tails_us") or {}).get("candidate")
            if own is None:
                cand = rec["null_ms"]["candidate"], rec["null_synced_ms"]["candidate"]
                own = statistics.median(d - t for t, d in zip(*cand)) * 1e3
            pairs[(path.name, m.group(1), m.group(2))][m.group(3)] = (r["stream_ms"], (r["beyond_ms"] / r["stream_ms"] - 1) * 100, own - r["base_us"])
    return {k: v for k, v in pairs.items() if len(v) == 2}


TRIGGERS: dict[str, Callable[[tuple[float, float, float]], bool]] = {
    "none": lambda w: False,
    "instrument": lambda w: w[2] > 10.0,
    "charge>0.5": lambda w: w[1] > 0.5,
    "charge>1": lambda w: w[1] > 1.0,
    "charge>1.5": lambda w: w[1] > 1.5,
}


def simulate(pairs: dict[Any, dict[str, tuple[float, float, float]]], trigger: Callable[[tuple[float, float, float]], bool],
             rounds: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    pool: dict[str, list[tuple[float, float, float]]] = collections.defaultdict(list)
    for (_, problem, _), pair in pairs.items():
        pool[problem].extend(pair.values())
    outside = timed_again = seen = 0
    for _ in range(rounds):
        for (_, problem, _), pair in pairs.items():
            price = {}
            for kind, (stream, charge, reading) in pair.items():
                seen += 1
                price[kind] = stream * (1 + charge / 100)
                if trigger((stream, charge, reading)):
                    timed_again += 1
                    again = rng.choice(pool[problem])
                    price[kind] = max(stream * (1 + rng.gauss(0, 0.002)) * (1 + again[1] / 100), stream)
            outside += abs(price["concurrent"] / price["alone"] - 1) > 0.02
    return {"pairs_outside_2pct": outside / rounds, "windows_timed_again": timed_again / seen if seen else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--seed", type=int, default=2)
    a = p.parse_args(argv)
    pairs = windows(a.files)
    out = {"files": [f.name for f in a.files], "pairs": len(pairs),
           "triggers": {name: simulate(pairs, fn, a.rounds, a.seed) for name, fn in TRIGGERS.items()}}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
