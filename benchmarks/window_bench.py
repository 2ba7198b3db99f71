"""What asking for each timed call's seed costs (judge.inputs.asking_getter, judge.window.quiet_window).

Starts one reference child as the judge does, sets the problem up, and times batches of eager calls
through the 'time' command as judge.measure sends it, judge-side wall clock per call:

- `fresh`: every call's inputs refreshed from a seed (the protocol: at a commit with asking_getter,
  each seed is asked for at its call's turn; before it, the seeds came in the command);
- `pool`: the pool as it is, no refresh (the same command with no seed), for scale;

alternating the two in rounds, and in the same process the pieces the ask adds: quiet_window and
the refresh itself (release and fill) on their own. Run it at two commits (a worktree each) to
compare; the JSON says which protocol the commit has.

    PYTHONPATH=src python3 benchmarks/window_bench.py --out DIR --commit C [--device cpu|cuda]
        [--problem examples/cpu/softmax/problem.py] [--calls 50] [--rounds 12]

Writes DIR/window_<device>_<commit>.json.
"""

from __future__ import annotations

import argparse
import inspect
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pieces(problem_path: str, device: str, n: int) -> dict[str, float]:
    """Median microseconds of quiet_window and of one refresh, in this process (no candidate)."""
    import torch

    from kernelwright.judge import inputs, window
    from kernelwright.core.records import Case

    problem = inputs.import_file(problem_path, "kw_window_problem")
    dev = torch.device(device)
    pool = [inputs.raw_inputs(problem, Case("native", 1), dev)]
    out: dict[str, float] = {}
    if hasattr(window, "quiet_window"):
        window.note_hooks()
        new = "keep" in inspect.signature(window.quiet_window).parameters  # since f0c2865: (first, keep), note_window(problem, device)
        if new:
            window.note_window(problem, dev)
        collector = window.open_window()
        keep: list = []
        for first in ((False, True) if new else (None,)):
            t = []
            for _ in range(n):
                t0 = time.perf_counter()
                window.quiet_window(first, keep) if new else window.quiet_window()
                t.append((time.perf_counter() - t0) * 1e6)
                keep.clear()
            out["quiet_window_first_us" if first else "quiet_window_us"] = statistics.median(t)
        window.close_window(collector) if new else window.close_window()
    t = []
    for i in range(n):
        t0 = time.perf_counter()
        inputs.refresh_inputs(problem, pool[0], 1000 + i, dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t.append((time.perf_counter() - t0) * 1e6)
    out["refresh_us"] = statistics.median(t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--problem", default=None, help="default: examples/<device>/softmax/problem.py")
    ap.add_argument("--calls", type=int, default=50, help="calls per batch")
    ap.add_argument("--rounds", type=int, default=12, help="rounds of (fresh, pool) batches")
    a = ap.parse_args()
    if a.calls < 1 or a.rounds < 1:
        ap.error("--calls and --rounds must be at least 1")
    problem_path = str(Path(a.problem or ROOT / "examples" / a.device / "softmax" / "problem.py").resolve())
    if not Path(problem_path).is_file():
        ap.error(f"no problem file at {problem_path}")

    from kernelwright.core import records
    from kernelwright.judge.measure import _Rounds  # noqa: F401 - the judge's own module must import
    from kernelwright.judge.workers import Child, ChildConfig

    asks = hasattr(records, "ASK_SEED")
    rng = random.Random(7)
    sw = {"flush": a.device == "cuda", "events": a.device == "cuda", "sync": a.device == "cuda", "lead_us": 0.0}
    walls: dict[str, list[float]] = {"fresh": [], "pool": []}
    inputs_ms: dict[str, list[float]] = {"fresh": [], "pool": []}
    with tempfile.TemporaryDirectory(prefix="kw-window-") as tmp:
        cfg = ChildConfig(role="reference", device=a.device, gpu_index=0, workdir=Path(tmp), env={})
        with Child(cfg) as ref:
            ref.call("setup", {"problem_path": problem_path, "device": a.device, "precision": "fp32", "init_seed": 1,
                               "atol": None, "rtol": None, "strict": True}, timeout_s=600)
            ref.call("setup_timing", {"pool_seeds": [11, 12, 13], "compile": False, "compile_mode": "default", "warmup_ms": 200.0,
                                      "rehearse": None}, timeout_s=600)
            total = a.rounds * 2
            done = 0
            for r in range(a.rounds):
                for kind in (("fresh", "pool") if r % 2 == 0 else ("pool", "fresh")):
                    calls = [[rng.randrange(3), rng.randrange(1, 2**31) if kind == "fresh" else None] for _ in range(a.calls)]
                    answers = [s for _slot, s in calls if s is not None]
                    args = {"contender": "eager", "switches": sw, "save": {}}
                    if asks:
                        args["calls"] = [[slot, None if s is None else records.ASK_SEED] for slot, s in calls]
                        kw = {"answers": answers}
                    else:
                        args["calls"] = calls
                        kw = {}
                    t0 = time.perf_counter()
                    reply = ref.call("time", args, timeout_s=600, **kw)
                    wall = (time.perf_counter() - t0) * 1e3
                    walls[kind].append(wall / a.calls)
                    inputs_ms[kind].append(reply.get("host_ms", {}).get("inputs", 0.0) / a.calls)
                    done += 1
                    print(f"\r{done}/{total} batches", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
    pieces = _pieces(problem_path, a.device, 200)
    med = {k: statistics.median(v) for k, v in walls.items()}
    result = {
        "commit": a.commit, "device": a.device, "problem": str(Path(problem_path).relative_to(ROOT)) if problem_path.startswith(str(ROOT)) else problem_path,
        "protocol": "seed asked per call" if asks else "seeds in the command",
        "calls_per_batch": a.calls, "rounds": a.rounds,
        "wall_ms_per_call": {k: {"median": med[k], "all": v} for k, v in walls.items()},
        "refresh_and_ask_ms_per_call": med["fresh"] - med["pool"],
        "child_inputs_ms_per_call": {k: statistics.median(v) for k, v in inputs_ms.items()},
        "in_process": pieces,
        "python": platform.python_version(), "host": platform.node(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"window_{a.device}_{a.commit}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"{result['protocol']}: wall per call fresh {med['fresh']:.4g} ms, pool {med['pool']:.4g} ms, "
          f"difference {result['refresh_and_ask_ms_per_call']:.4g} ms; in process {pieces}")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
