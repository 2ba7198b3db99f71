"""The reference child's commands that a verdict does not use, on the problem its `setup` loaded
(judge.child_reference, whose state they read):

- `breakdown`: where the reference's time goes, under the torch profiler (the agent's profile tool);
- `repeat`: forwards on the same input tensors, with no reseeding between them, agree;
- `compiled`: torch.compile of the model gives the eager outputs;
- `time_eager`: the eager forward's median time, with the judge's timing function;
- `release`: drop the problem, its model and what was compiled of it, and give the memory back.

Synthesis holds a generated problem to the last four (synth.filters). Its workers call them, with
`child_reference.setup` and `degeneracy`, in the worker's own process: a confined process of its
own that runs the task's code as a reference child does (synth.pool), never the caller's. Each
command takes and answers plain values, as the child protocol carries them.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import torch

from kernelwright.judge import child_reference as ref
from kernelwright.judge import correctness, inputs, timing
from kernelwright.judge.inputs import Case

BREAKDOWN_ROWS = 15  # rows kept by default
REPEATS = 3  # forwards on the same tensors in `repeat`
WARMUP_CALLS = 2  # untimed calls before `time_eager` times


def _native(seed: int) -> list[Any]:
    """get_inputs() as written, under `seed`."""
    return inputs.make_inputs(ref.S.problem, Case("native", seed), ref.S.device)


def _agree(a: list[torch.Tensor], b: list[torch.Tensor]) -> correctness.Comparison:
    S = ref.S
    return correctness.compare_outputs(a, b, S.atol, S.rtol, True, S.tols)


def breakdown(args: dict[str, Any]) -> dict[str, Any]:
    """Where the reference's time goes: one warm-up forward, then a few under the torch profiler
    on get_inputs(); per kernel (CUDA: device time) or per operator (CPU: self CPU time), the
    top rows as [name, total ms over the forwards, calls, share of the total]."""
    from torch.profiler import ProfilerActivity, profile

    forwards = max(1, int(args.get("forwards", 3)))
    values = ref._checked("get_inputs() failed", lambda: _native(int(args.get("seed", 1))))
    cuda = ref.S.device.type == "cuda"
    ref._forward(values)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(forwards):
            ref._forward(values)
    totals = _device_rows(prof) if cuda else _operator_rows(prof)
    whole = sum(us for us, _ in totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:int(args.get("rows", BREAKDOWN_ROWS))]
    rows = [[name[:200], us / 1e3, n, us / whole] for name, (us, n) in ranked]
    return {"rows": rows, "total_ms": whole / 1e3, "forwards": forwards, "unit": "kernel" if cuda else "operator"}


def _device_rows(prof: Any) -> dict[str, tuple[float, int]]:
    """{kernel name: (device microseconds, launches)} over every device activity recorded."""
    totals: dict[str, tuple[float, int]] = {}
    for e in prof.events():
        if str(getattr(e, "device_type", "CPU")).endswith("CPU"):
            continue
        us, n = totals.get(e.name, (0.0, 0))
        totals[e.name] = (us + float(e.device_time_total), n + 1)
    return totals


def _operator_rows(prof: Any) -> dict[str, tuple[float, int]]:
    """{operator: (self CPU microseconds, calls)}: self times, so nested operators are not counted twice."""
    return {e.key: (float(e.self_cpu_time_total), int(e.count)) for e in prof.key_averages()
            if not e.key.startswith("[") and e.self_cpu_time_total > 0}


def repeat(args: dict[str, Any]) -> dict[str, Any]:
    """REPEATS forwards on one set of tensors (get_inputs() under args["seed"]), no reseeding
    between them: {"ok", "message"}, the first disagreement with the first forward's outputs at
    the problem's tolerance. Setup's determinism check reseeds before each run, so a forward that
    draws random numbers passes it and fails this."""
    values = _native(int(args["seed"]))
    first = ref._forward(values)
    for _ in range(REPEATS - 1):
        cmp = _agree(first, ref._forward(values))
        if not cmp.ok:
            return {"ok": False, "message": cmp.message}
    return {"ok": True, "message": ""}


def compiled(args: dict[str, Any]) -> dict[str, Any]:
    """torch.compile of the model (args["backend"]) against eager on get_inputs() under
    args["seed"]: {"ok", "error" (the compile or its run failed: the exception in words, else
    None), "message" (the disagreement)}. Dynamo's caches are reset before and after."""
    S = ref.S
    values = _native(int(args["seed"]))
    eager = ref._forward(values)
    try:
        torch._dynamo.reset()
        fn = torch.compile(S.model, backend=args["backend"])
        with torch.no_grad():
            got = correctness.as_output_list(fn(*values))
        if S.device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a compile failure of any kind is the answer
        _reset_quietly()  # a reset that fails again must not replace this first error (the one that says why)
        return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}", "message": ""}
    torch._dynamo.reset()
    cmp = _agree(eager, got)
    return {"ok": cmp.ok, "error": None, "message": cmp.message}


def _reset_quietly() -> None:
    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001 - the caller reports the error that came first
        pass


def time_eager(args: dict[str, Any]) -> dict[str, Any]:
    """The eager forward's median milliseconds over args["calls"] calls on get_inputs() under
    args["seed"], after WARMUP_CALLS, with the judge's timing function (on a GPU: L2 flushed, CUDA
    events, device-wide sync; on a CPU the host clock): {"median_ms"}."""
    S = ref.S
    values = _native(int(args["seed"]))
    cuda = S.device.type == "cuda"
    switches = timing.TimingSwitches(flush=cuda, events=cuda, sync=cuda)
    same: Callable[[int], list[Any]] = lambda i: values  # noqa: E731 - every call on the same tensors
    with torch.no_grad():
        timing.time_calls(S.model, same, WARMUP_CALLS, cuda=cuda, switches=switches)
        return {"median_ms": statistics.median(timing.time_calls(S.model, same, int(args["calls"]), cuda=cuda, switches=switches))}


def release(args: dict[str, Any]) -> dict[str, Any]:
    """Drop the problem, its model, what was compiled of it and its kept outputs; give the
    allocator's cached device memory back. The next problem comes with a new `setup`."""
    S = ref.S
    S.model = S.compiled = S.problem = None
    S.refs, S.pool, S.oracle = [], [], {}
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {}


def handlers() -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {"breakdown": breakdown, "repeat": repeat, "compiled": compiled, "time_eager": time_eager, "release": release}
