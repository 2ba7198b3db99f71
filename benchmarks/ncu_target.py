"""Run one candidate's forward a few times, for ncu to measure (judge_bench.py --sections ncu).

With --events it times the same calls with the judge's own timing function (L2 flush, events,
device sync) and prints {"event_median_ms": ...}; without it, it only runs them (under ncu).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from kernelwright.judge import inputs, timing
from kernelwright.judge.inputs import Case


def _cycles_per_us() -> float:
    """Spin-kernel cycles per microsecond, measured with events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / (start.elapsed_time(end) * 1e3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem", type=Path)
    ap.add_argument("candidate", type=Path, help="model_new.py")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--events", action="store_true")
    ap.add_argument("--variants", action="store_true", help="with --events: also time without the device sync and with a lead spin kernel")
    args = ap.parse_args()
    dev = torch.device("cuda")
    problem = inputs.import_file(args.problem, "kw_problem")
    cand = inputs.import_file(args.candidate, "kw_candidate")
    model = inputs.init_model(problem, cand.ModelNew, 1, dev)
    values = inputs.raw_inputs(problem, Case("native", 1), dev)
    switches = timing.TimingSwitches(flush=True, events=args.events, sync=True)
    with torch.no_grad():
        timing.warm_up(model, lambda i: values, 50.0, cuda=True) if args.events else None
        times = timing.time_calls(model, lambda i: values, args.runs, cuda=True, switches=switches)
    result = {"event_median_ms": statistics.median(times), "n": len(times)}
    if args.events and args.variants:
        with torch.no_grad():
            nosync = timing.TimingSwitches(flush=True, events=True, sync=False)
            result["nosync_median_ms"] = statistics.median(timing.time_calls(model, lambda i: values, args.runs, cuda=True, switches=nosync))
            cycles = _cycles_per_us() * 200  # a 200 us lead, longer than any Python launch path here
            lead = timing.TimingSwitches(flush=True, events=True, sync=True, lead_cycles=int(cycles))
            result["lead200us_median_ms"] = statistics.median(timing.time_calls(model, lambda i: values, args.runs, cuda=True, switches=lead))
    if args.events:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
