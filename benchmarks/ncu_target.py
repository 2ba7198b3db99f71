"""Run one candidate's forward a few times, for ncu to measure (judge_bench.py --sections ncu).

With --events it times the same calls with the judge's own timing function and default protocol
(L2 flush, lead spin, events, device sync) and prints {"event_median_ms": ...}, the time to the
stream's own end event that the judge reports for an honest call, with the time to the end event
after the device-wide synchronize ("synced_median_ms"), the empty call's stream time
("null_median_ms") and the difference ("corrected_median_ms", what step harness_overhead
reports); without --events, it only runs them (under ncu).
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
from kernelwright.judge.policy import TimingConfig


def _spin_waits() -> str:
    """Make this process's host threads spin while they wait for the GPU (CU_CTX_SCHED_SPIN on the
    primary context, set before torch creates it); '' on success, else why not. An experiment for
    the synchronize's cost in the timed interval (benchmarks/results/judge_h200.md)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        for rc in (cuda.cuInit(0), cuda.cuDeviceGet(ctypes.byref(dev), 0)):
            if rc != 0:
                return f"CUDA driver error {rc}"
        set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
        rc = set_flags(dev, ctypes.c_uint(1))  # CU_CTX_SCHED_SPIN
        return "" if rc == 0 else f"cuDevicePrimaryCtxSetFlags returned {rc}"
    except (OSError, AttributeError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _zero_flush() -> None:
    buf = timing._FLUSH.get("zero")
    if buf is None:
        buf = timing._FLUSH["zero"] = torch.empty(2 * timing.l2_bytes() // 4, dtype=torch.int32, device="cuda")
    buf.zero_()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem", type=Path)
    ap.add_argument("candidate", type=Path, help="model_new.py")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--events", action="store_true")
    ap.add_argument("--variants", action="store_true", help="with --events: also time without the lead spin and without the device sync")
    ap.add_argument("--spin", action="store_true", help="host threads spin while waiting for the GPU (set before CUDA starts)")
    ap.add_argument("--profile-first", action="store_true",
                    help="run one forward under the torch profiler (CPU activity, as the judge's correctness cases do) before timing")
    args = ap.parse_args()
    spin_error = _spin_waits() if args.spin else None
    dev = torch.device("cuda")
    problem = inputs.import_file(args.problem, "kw_problem")
    cand = inputs.import_file(args.candidate, "kw_candidate")
    model = inputs.init_model(problem, cand.ModelNew, 1, dev)
    values = inputs.raw_inputs(problem, Case("native", 1), dev)
    lead = TimingConfig().lead_us  # the judge's default protocol
    protocol = timing.switches_from({"flush": True, "events": args.events, "sync": True, "lead_us": lead}, cuda=True)
    result = {}
    with torch.no_grad():
        if args.profile_first:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]):
                model(*values)
            torch.cuda.synchronize()
            result["profiled_first"] = True
        if args.events:
            timing.warm_up(model, lambda i: values, 50.0, cuda=True)
        synced: list[float] = []
        times = timing.time_calls(model, lambda i: values, args.runs, cuda=True, switches=protocol, synced=synced)
        result.update(event_median_ms=statistics.median(times), n=len(times), lead_us=protocol.lead_us)
        if synced:
            result["synced_median_ms"] = statistics.median(synced)
        if args.events:
            null_synced: list[float] = []
            null = statistics.median(timing.time_null(args.runs, cuda=True, switches={"flush": True, "events": True, "sync": True, "lead_us": lead},
                                                      synced=null_synced))
            result.update(null_median_ms=null, corrected_median_ms=result["event_median_ms"] - null,
                          synced_corrected_median_ms=result["synced_median_ms"] - statistics.median(null_synced))
        if args.events and args.variants:
            variants = {
                "nolead": timing.TimingSwitches(flush=True, events=True, sync=True),  # the protocol before the lead spin
                "nosync": timing.TimingSwitches(flush=True, events=True, sync=False, lead_us=protocol.lead_us),
            }
            for name, sw in variants.items():
                result[f"{name}_median_ms"] = statistics.median(timing.time_calls(model, lambda i: values, args.runs, cuda=True, switches=sw))
            read_flush = timing.flush_l2
            timing.flush_l2 = _zero_flush  # the flush before 2026-11-30: a write that leaves L2 dirty
            try:
                result["zeroflush_median_ms"] = statistics.median(timing.time_calls(model, lambda i: values, args.runs, cuda=True, switches=protocol))
            finally:
                timing.flush_l2 = read_flush
    if args.spin:
        result["spin"] = spin_error or "on"
    if args.events:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
