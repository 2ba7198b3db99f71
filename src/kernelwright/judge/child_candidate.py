"""The candidate child: imports and runs the candidate, in a fresh GPU-pinned process.

Nothing here decides correctness: outputs are staged and handed to the reference child by
descriptor (judge.handover), and it compares them.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from kernelwright.judge import correctness, digest, handover, inputs, jit_clock, ops, sandbox, timing
from kernelwright.judge.channel import close_fds
from kernelwright.judge.child import CODE_ROOT, OUTBOX, CommandError, describe, hush, lead_status
from kernelwright.judge.watch import dispatch_moved, flags_diff, identities_moved, pin_flags, snapshot_dispatch, snapshot_flags, snapshot_identities
from kernelwright.judge.window import batch_getter, note_window
from kernelwright.judge.inputs import Case


class _State:
    problem: Any = None  # the problem module (trusted code: inputs and weights)
    device: torch.device = torch.device("cpu")
    model: torch.nn.Module | None = None
    pool: list[list[Any]] = []
    pinned: dict[str, Any] = {}  # numerics flags as pinned before the candidate was imported
    check_flags: bool = True  # whether timing batches report moved flags
    identities: dict[str, Any] = {}  # watched functions as they were before the candidate's import
    dispatch: dict[str, Any] = {}  # the dispatcher's state for watch.JUDGE_OPS, as it was then
    check_identities: bool = True  # whether calls report replaced functions
    stager: handover.Stager = handover.Stager()  # the one staging area of this child's outputs
    sandbox: dict[str, Any] | None = None  # what judge.sandbox.enter applied at setup (None: none was asked for)


S = _State()
_clock = time.perf_counter  # bound before the candidate's import: its parts_s stay the judge's clock (judge.child._clock)


def _is_compile_failure(exc: BaseException) -> bool:
    if isinstance(exc, SyntaxError):
        return True
    if type(exc).__name__ == "BuildError" and type(exc).__module__.startswith("kernelwright.runtime"):
        return True
    text = str(exc)
    return "Error building extension" in text or "error: command" in text and "nvcc" in text


def _import_candidate(path: str) -> Any:
    try:
        return inputs.import_file(path, "kw_candidate")
    except BaseException as exc:  # noqa: BLE001
        kind = "compile" if _is_compile_failure(exc) else "import"
        raise CommandError(kind, f"importing the candidate failed: {describe(exc)}") from None


def _copy_weights(reference: torch.nn.Module, candidate: torch.nn.Module) -> bool:
    """Load the reference's weights into the candidate when names and shapes match exactly."""
    ref_sd, cand_sd = reference.state_dict(), candidate.state_dict()
    same = ref_sd.keys() == cand_sd.keys() and all(ref_sd[k].shape == cand_sd[k].shape for k in ref_sd)
    if same and ref_sd:
        candidate.load_state_dict(ref_sd)
    return same and bool(ref_sd)


def warm(args: dict[str, Any]) -> dict[str, Any]:
    """A spare child's one command before its candidate is known (judge.spares): make the device's
    context, nothing else. No candidate code has run here, and `setup` then runs as in a fresh child."""
    t0 = _clock()
    if args["device"] == "none":  # the round trip judge.spares asks before a spare is used
        return {"seconds": round(_clock() - t0, 3)}
    S.sandbox = S.sandbox or sandbox.ENTERED  # a spawned child entered it before torch's import
    if S.sandbox is None:  # before the device's context starts threads the sandbox would not bind; its
        # problem and candidate come later, copied into its folder's in/ by the judge (flow_children._spare_paths)
        S.sandbox = sandbox.enter_from_env(os.getcwd(), (os.path.join(os.getcwd(), sandbox.SPARE_INPUTS),))
    if args["device"] != "cuda":
        return {"seconds": round(_clock() - t0, 3)}
    device = torch.device("cuda")
    torch.empty(1, device=device)
    torch.cuda.synchronize()
    _, total = torch.cuda.mem_get_info()
    return {"seconds": round(_clock() - t0, 3), "total_bytes": int(total)}


def setup(args: dict[str, Any]) -> dict[str, Any]:
    """Enter the sandbox; import the problem (for inputs and weights) and the candidate; construct ModelNew."""
    S.sandbox = S.sandbox or sandbox.ENTERED  # a spawned child entered it before torch's import
    if S.sandbox is None:  # a spare entered it before its warm-up
        S.sandbox = sandbox.enter_from_env(os.getcwd(), (args["problem_path"], str(Path(args["candidate_path"]).parent)))
    S.device = torch.device(args["device"])
    CODE_ROOT[:] = [os.path.join(os.path.dirname(args["candidate_path"]), "")]  # its errors show its own frames only
    pin_flags(args["precision"])
    S.problem = inputs.import_file(args["problem_path"], "kw_problem", size=args.get("size") or "full")
    reference = inputs.init_model(S.problem, S.problem.Model, args["init_seed"], S.device)
    S.pinned = snapshot_flags()  # after the problem's own code (the reference child runs it too)
    lead_info = lead_status(S.device)  # built and loaded before any candidate code runs
    lead_info["digest"] = digest.load(S.device.type) if args.get("check_inputs", True) else "off"  # the input check's kernel, likewise
    S.check_identities = args.get("check_identities", True)
    # The profiled call's profiler imports torch._dynamo (and a candidate's torch.compile does on
    # any device), and that import rebinds torch.manual_seed (torch 2.11): import it before the
    # watch is taken, so that only the candidate's own replacements count (the fork server has it
    # already; a spawned child needs it here).
    importlib.import_module("torch._dynamo")
    if S.device.type == "cuda":
        handover._cuda()  # the driver library the hand-over binds once: bound before the watch, like every module global
    inputs.bind_generators(S.device)
    note_window(S.problem, S.device)  # what the draw of timed inputs reads, as it is before the candidate's import
    S.identities = snapshot_identities() if S.check_identities else {}
    S.dispatch = snapshot_dispatch() if S.check_identities else {}
    module = _import_candidate(args["candidate_path"])
    cls = getattr(module, "ModelNew", None)
    if cls is None:
        raise CommandError("compile", "the candidate defines no class ModelNew")
    try:
        S.model = inputs.init_model(S.problem, cls, args["init_seed"], S.device)
        copied = _copy_weights(reference, S.model)
    except BaseException as exc:  # noqa: BLE001
        raise CommandError("runtime", f"constructing ModelNew(*get_init_inputs()) failed: {describe(exc)}") from None
    del reference
    if args.get("triton_kernels"):  # its Triton kernels compile (and autotune) at their first calls: timed apart
        jit_clock.watch(CODE_ROOT[0])
    return {"weights_copied": copied, **lead_info, **_replaced()}


def _jit() -> dict[str, Any]:
    """{"jit": ...}: Triton's just-in-time work so far (judge.jit_clock), when any Triton function is watched."""
    done = jit_clock.report()
    return {"jit": done} if done is not None else {}


def _replaced() -> dict[str, Any]:
    """{"identities_moved": [...]} when the candidate replaced a watched function, registered a
    kernel for an operator the judge's code runs here, or left a torch mode on; else {}."""
    moved = identities_moved(S.identities) + dispatch_moved(S.dispatch) if S.check_identities else []
    return {"identities_moved": moved} if moved else {}


def _call(values: list[Any]) -> Any:
    with torch.no_grad():
        out = S.model(*values)
    if S.device.type == "cuda":
        torch.cuda.synchronize()
    return out


def _poison(output_bytes: list[int]) -> None:
    correctness.poison(S.device, output_bytes)  # on a GPU: the allocator's free blocks in place, nothing more held


def _save(out: Any) -> dict[str, Any]:
    """Stage the output as returned for the reference child (judge.handover); its description,
    with any descriptor queued to go with the reply."""
    hush()  # until the next command: nothing of the candidate's runs on this thread while the output is taken
    desc, fds = S.stager.stage(out, S.device)
    OUTBOX.extend(fds)
    return desc


def run_case(args: dict[str, Any]) -> dict[str, Any]:
    """Run one correctness case with the enabled checks; save the output for comparison. A "near"
    case first calls the candidate on get_inputs() under its seed, then changes a few elements of
    those same tensors in place (inputs.perturb) and runs the case on them. The reply's `parts_s`
    says where the case's time went (for the judge's log only)."""
    case = Case.from_dict(args["case"])
    seen: dict[str, int] | None = {} if args.get("audit") else None  # every case under the op audit's mode
    parts = {"inputs": 0.0, "digest": 0.0, "poison": 0.0, "call": 0.0, "checks": 0.0, "save": 0.0}
    clock = [_clock()]
    cuda = S.device.type == "cuda"

    def lap(part: str, synced: bool = False) -> None:
        if synced and cuda:  # the part's device work in its own figure; the digest's read-back would wait for it anyway
            torch.cuda.synchronize()
        now = _clock()
        parts[part] += now - clock[0]
        clock[0] = now

    def reply(d: dict[str, Any]) -> dict[str, Any]:
        return {**d, "parts_s": parts, **_jit()}

    if case.kind == "near":
        patch = inputs.near_patch(S.problem, case.seed, S.device)  # drawn first: one input set at a time (judge.memory)
        values = inputs.raw_inputs(S.problem, Case("native", case.seed), S.device)
        first = inputs.input_record(values) if args["check_inputs"] else None
        lap("inputs")
        _audited_call(values, seen)
        lap("call")
        replaced = _replaced()
        if replaced:
            return reply(replaced)
        changed = inputs.changed_inputs(first, values) if first is not None else []
        if changed:
            return reply({"inputs_changed": changed, **({"ops": seen} if seen is not None else {})})
        inputs.perturb(values, patch)
        lap("checks")
    else:
        values = inputs.make_inputs(S.problem, case, S.device)
        lap("inputs", synced=True)
    before = inputs.input_record(values) if args["check_inputs"] else None
    S.check_flags = args["check_flags"]
    lap("digest")
    if args["poison"]:
        _poison(args["output_bytes"])
    lap("poison")
    out = _audited_call(values, seen)
    lap("call", synced=True)
    replaced = _replaced()
    if replaced:
        return reply(replaced)
    audited = {"ops": seen} if seen is not None else {}
    moved = flags_diff(S.pinned) if args["check_flags"] else {}
    if moved:
        return reply({"flags_changed": moved, **audited})
    if before is not None:
        changed = inputs.changed_inputs(before, values)
        if changed:
            return reply({"inputs_changed": changed, **audited})
    lap("checks")
    desc = _save(out)
    lap("save")
    replaced = _replaced()  # again: the input check and the save ran code of the candidate's (its output's methods, gc callbacks)
    if replaced:
        close_fds(OUTBOX)
        OUTBOX.clear()
        return reply(replaced)
    return reply({"handover": desc, **audited})


def setup_timing(args: dict[str, Any]) -> dict[str, Any]:
    """Build the input pool and warm up. On CUDA the correctness phase's cached blocks go back to
    the device first and the L2 flush buffer (timing.flush_l2) takes a segment of its own before
    the pool: made later, in the rehearsal, the buffer split one of the softmax example's cached
    512 MiB blocks on the H200, so the next output needed a new one and the child's allocator grew
    from 1 090 to 1 604 MiB (benchmarks/results/memory_h200.md)."""
    cuda = S.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        timing.flush_l2()
    S.pool = inputs.make_pool(S.problem, args["pool_seeds"], S.device)
    with torch.no_grad():
        calls, per_call = timing.warm_up(S.model, inputs.cycle(S.pool), args["warmup_ms"], cuda=cuda)
        rehearsal = args.get("rehearse")
        if rehearsal:
            got = inputs.pool_getter(S.problem, S.pool, rehearsal["calls"], S.device)
            timing.rehearse(S.model, got, len(rehearsal["calls"]), cuda=cuda, switches=rehearsal["switches"])
    return {"warmup_calls": calls, "per_call_ms": per_call, **_replaced(), **_jit()}


def time_batch(args: dict[str, Any]) -> dict[str, Any]:
    """Time one batch of candidate calls; stage the output the judge asked to re-check (at most
    one a batch). Contender "null" times the protocol around an empty call instead (step
    harness_overhead)."""
    synced: list[float] = []
    host: dict[str, float] = {}
    probe = timing.time_probe(args, cuda=S.device.type == "cuda", synced=synced, host=host)
    if probe is not None:
        return {"times_ms": probe, "synced_ms": synced, "host_ms": host}
    calls, save = args["calls"], {int(k) for k in args["save"]}
    if any(k != len(calls) - 1 for k in save):
        # staging hushes this process until the next command (child.hush): no call, and no ask, may follow it
        raise CommandError("infra", "only a batch's last call may be staged")
    fresh_args, finish = batch_getter(S.problem, S.pool, calls, S.device)
    stage_at = len(calls) - 1 if save else -1  # the one call that may be staged (above)
    steps = _batch_steps(fresh_args, stage_at, args.get("poison"))
    next(steps)
    get_args = steps.send  # its state in a generator's frame, not in closure cells the candidate could swap (inputs.asking_getter)
    staged: dict[str, Any] = {}

    def on_output(i: int, out: Any) -> None:
        if i == stage_at:
            staged["handover"] = _save(out)

    switches = timing.switches_from(args["switches"], cuda=S.device.type == "cuda")
    try:
        with torch.no_grad():
            times = timing.time_calls(S.model, get_args, len(calls), cuda=S.device.type == "cuda", switches=switches, on_output=on_output,
                                      synced=synced, host=host)
    finally:
        finish()
    moved = flags_diff(S.pinned) if S.check_flags else {}
    return {"times_ms": times, "synced_ms": synced, "host_ms": host, **staged, **({"flags_changed": moved} if moved else {})}


def _batch_steps(fresh_args: Any, stage_at: int, poison_bytes: Any) -> Any:
    """time_batch's get_args as a generator: whether the call is staged is read before its inputs
    are drawn (a key of the candidate's in a set of staged calls would have its __eq__ run by
    `i in save` after the draw), and the poison runs after the draw, before the call."""
    values: list[Any] = []
    while True:
        i = yield values
        stage = i == stage_at
        values = fresh_args(i)
        if stage and poison_bytes is not None:
            _poison(poison_bytes)  # after the inputs are written, before the call: outside the timed region


def check(args: dict[str, Any]) -> dict[str, Any]:
    """The watch on replaced functions and the dispatcher, on its own: the judge sends it after
    every timed batch, outside that batch's wall clock."""
    return _replaced()


def profile(args: dict[str, Any]) -> dict[str, Any]:
    """Kernel time of one call, summed from the torch profiler (CUDA only), on get_inputs() under
    the given seed, taken into the timing pool's first set when there is one rather than a set
    beside it: no second set is needed (the softmax example's peak is setup_timing's either way,
    benchmarks/results/memory_h200.md)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    dropped: list[Any] = []  # what the refresh replaced: let go after the profiled call, not between the seed and it
    if S.pool:  # the timing pool's set takes the call's inputs, as a timed call's: no second set beside it (judge.memory)
        layouts = inputs.release_slot(S.pool[0])
        inputs.fill_slot(S.problem, S.pool[0], layouts, args["input_seed"], S.device, dropped)
        values = S.pool[0]
    else:
        values = inputs.raw_inputs(S.problem, Case("native", args["input_seed"]), S.device)
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        _call(values)
    dropped.clear()
    total_us = sum(getattr(e, "self_device_time_total", 0.0) for e in prof.key_averages())
    kernels = sorted(((e.key, getattr(e, "self_device_time_total", 0.0)) for e in prof.key_averages()), key=lambda kv: -kv[1])
    return {"profiler_ms": total_us / 1e3, "kernels": [[k, us / 1e3] for k, us in kernels[:10]], "activities": _activities(prof),
            **_replaced()}


ACTIVITY_ROWS = 2000  # distinct (name, stream) rows sent; the rest are summed into one


def _activities(prof: Any) -> list[list[Any]]:
    """Every device activity of a profile as [name, milliseconds, stream], summed per name and
    stream, longest first: what the judge attributes (judge.provenance)."""
    total: dict[tuple[str, int], float] = {}
    for e in prof.events():
        if str(getattr(e, "device_type", "CPU")).endswith("CPU"):
            continue
        key = (str(e.name)[:400], int(getattr(e, "device_resource_id", 0) or 0))
        total[key] = total.get(key, 0.0) + float(e.device_time_total) / 1e3
    rows = sorted(total.items(), key=lambda kv: -kv[1])
    kept = [[name, ms, stream] for (name, stream), ms in rows[:ACTIVITY_ROWS]]
    rest = sum(ms for _, ms in rows[ACTIVITY_ROWS:])
    return kept + ([[f"(activities beyond the first {ACTIVITY_ROWS})", rest, -1]] if rest else [])


def _audit_mode(seen: dict[str, int]) -> Any:
    """A dispatch mode that counts every ATen operator it reaches (from Python and from C++
    extension code) into seen; the judge decides what counts as compute (judge.ops)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Audit(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps a mode's __torch_dispatch__ in dynamo.disable unless this says False;
            # the first call then imports torch._dynamo (1.1 s on the 2-core box, 4-5 s of the
            # op audit on the H200). Setup imports it before the watch on every device, so the
            # wrap costs nothing here; without the wrap, a candidate's torch.compile would trace
            # this method too, with the candidate's backend, and add its compiled frames' names
            # to this module.
            return "torch._dynamo" in sys.modules

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            name = ops.audit_name(func.name(), args, kwargs or {})
            seen[name] = seen.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    return _Audit()


def _audited_call(values: list[Any], seen: dict[str, int] | None) -> Any:
    """_call, under the audit mode and the profiler when seen is a dict. The profiler's operator
    records sit below any dispatch mode: what a candidate runs with the mode switched off
    (torch._C._DisableTorchDispatch and kin) still shows there: a top-level operator of which
    neither it nor anything it called reached the mode is counted in seen as "profiled:NAME".
    (Composite operators, `movedim` say, reach the mode as what they decompose into.)

    The profiler is torch's legacy CPU one (operator records only, no CUPTI; note that
    `torch.autograd.profiler.profile(use_kineto=False)` without a device still runs kineto).
    The default (kineto) profiler may attach CUPTI even for CPU activity, and torch leaves CUPTI attached after
    it stops unless told to tear it down (torch issue 144455), so every later CUDA call of this
    process, the timed ones included, would pay for it: the suspected cause, not yet confirmed on
    a GPU, of the candidate child's host time per timed call exceeding the reference child's by
    0.9-3.8 ms on the H200 (benchmarks/results/judge_h200.md)."""
    if seen is None:
        return _call(values)
    from torch.autograd.profiler_legacy import profile

    with profile() as prof:
        with _audit_mode(seen):
            out = _call(values)
    seen_base = {ops.base_name(op) for op in seen}
    for ev in prof.function_events:
        if ev.name.startswith("aten::") and getattr(ev, "cpu_parent", None) is None:
            names, stack = set(), [ev]
            while stack:
                e = stack.pop()
                names.add(ops.base_name(e.name))
                stack.extend(getattr(e, "cpu_children", ()) or ())
            if not names & seen_base:
                key = "profiled:" + ev.name
                seen[key] = seen.get(key, 0) + 1
    return out


def audit(args: dict[str, Any]) -> dict[str, Any]:
    """One forward, on inputs the candidate has not seen, under the audit mode; its output is staged
    for the reference child to compare, and Python threads alive during the call are reported (a
    dispatch mode sees only its own thread)."""
    import threading

    seen: dict[str, int] = {}
    values = inputs.make_inputs(S.problem, Case.from_dict(args["case"]), S.device)
    out = _audited_call(values, seen)
    threads = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
    desc = _save(out)
    return {"ops": seen, "threads": threads, "handover": desc, **_replaced()}


def handlers() -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {"warm": warm, "setup": setup, "run_case": run_case, "setup_timing": setup_timing, "time": time_batch, "check": check, "profile": profile, "audit": audit}
