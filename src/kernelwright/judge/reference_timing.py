"""The reference child's side of the timing protocol: the timing pool and the baselines' warm-up
(`setup_timing`), and batches of the eager or compiled baseline, or of the judge's empty and held
calls (`time`), with the policy's precision allowance. They read judge.child_reference's state,
whose `setup` loaded the problem and its model.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Callable, Iterator

import torch

from kernelwright.judge import child_reference, inputs, timing
from kernelwright.judge.window import batch_getter

LAUNCH_CALLS = 5  # the last warm-up calls whose host launch times set the lead spin (setup_timing)


def setup_timing(args: dict[str, Any]) -> dict[str, Any]:
    """Build the input pool, compile the baseline if asked, and warm up. A second call in one
    evaluation (a window timed again, judge.phases_timing) drops the last pool before making the next
    and keeps the compiled baseline (the same model, the same shapes)."""
    S = child_reference.S
    S.pool = []
    S.pool = inputs.make_pool(S.problem, args["pool_seeds"], S.device)
    compile_s = None
    if args["compile"] and S.compiled is None:
        t0 = time.perf_counter()
        mode = args.get("compile_mode") or "default"
        S.compiled = torch.compile(S.model) if mode == "default" else torch.compile(S.model, mode=mode)
        with torch.no_grad():
            _allowance(S.compiled)(*S.pool[0])
        compile_s = time.perf_counter() - t0
    cuda = S.device.type == "cuda"
    per_call, launch = {}, {}
    for name, fn in (("eager", _allowance(S.model)), ("compile", _allowance(S.compiled))):
        if fn is None:
            continue
        with torch.no_grad():
            launched: list[float] = []
            _, per_call[name] = timing.warm_up(fn, inputs.cycle(S.pool), args["warmup_ms"], cuda=cuda, launched=launched)
            if cuda:  # the lead spin's length (lead.lead_for): the median of the last, warm calls
                launch[name] = statistics.median(launched[-LAUNCH_CALLS:])
            rehearsal = args.get("rehearse")
            if rehearsal:
                got = inputs.pool_getter(S.problem, S.pool, rehearsal["calls"], S.device)
                timing.rehearse(fn, got, len(rehearsal["calls"]), cuda=cuda, switches=rehearsal["switches"])
    return {"compile_s": compile_s, "per_call_ms": per_call, "launch_ms": launch}


def _allowance(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The baseline as the precision allowance lets it run: TF32 flags on (tf32), or under autocast
    to the allowed dtype (bf16, fp16); the baseline itself under strict fp32."""
    S = child_reference.S
    if S.precision == "fp32" or fn is None:
        return fn

    def wrapped(*a: Any) -> Any:
        if S.precision == "tf32":
            with tf32(True):
                return fn(*a)
        with torch.autocast(device_type=S.device.type, dtype=torch.bfloat16 if S.precision == "bf16" else torch.float16):
            return fn(*a)

    return wrapped


@contextlib.contextmanager
def tf32(on: bool) -> Iterator[None]:
    """TF32 for matrix products and cuDNN switched `on` (or off) for the block, then put back."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def time_batch(args: dict[str, Any]) -> dict[str, Any]:
    """Time one batch of the eager or compiled reference, with the precision allowance; contender
    "null" times the protocol around an empty call (step harness_overhead)."""
    S = child_reference.S
    synced: list[float] = []
    host: dict[str, float] = {}
    probe = timing.time_probe(args, cuda=S.device.type == "cuda", synced=synced, host=host)
    if probe is not None:
        return {"times_ms": probe, "synced_ms": synced, "host_ms": host}
    fn = _allowance(S.compiled if args["contender"] == "compile" else S.model)
    calls = args["calls"]  # [[slot, inputs.ASK or None], ...]: each call's seed asked for in its turn, as in the candidate's child
    get_args, finish = batch_getter(S.problem, S.pool, calls, S.device)
    switches = timing.switches_from(args["switches"], cuda=S.device.type == "cuda")
    try:
        with torch.no_grad():
            times = timing.time_calls(fn, get_args, len(calls), cuda=S.device.type == "cuda", switches=switches, synced=synced, host=host)
    finally:
        finish()
    return {"times_ms": times, "synced_ms": synced, "host_ms": host}


def handlers() -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {"setup_timing": setup_timing, "time": time_batch}
