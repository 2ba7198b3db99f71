"""The reference child: runs only the problem's code, never the candidate's.

It loads the problem and computes reference outputs (on a GPU kept in host memory when that is
cheaper than computing them again, else recomputed; on the CPU kept up to KEEP_BYTES; never written
to disk). Its other commands live beside it and read its state S: the comparisons of candidate
outputs handed over by descriptor (judge.reference_compare), the baselines' timing
(judge.reference_timing) and the commands a verdict does not use (judge.reference_checks).
"""

from __future__ import annotations

import hashlib
import importlib
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from kernelwright.judge import correctness, inputs, timing
from kernelwright.judge.guards import precision as precision_guard
from kernelwright.judge.child import CommandError, describe, error_kind, lead_status
from kernelwright.judge.inputs import Case
from kernelwright.judge.policy import resolve_tolerance
from kernelwright.judge.watch import pin_flags
from kernelwright.judge.window import note_window


class _State:
    problem: Any = None  # the problem module
    path: str = ""  # its file, for messages
    device: torch.device = torch.device("cpu")
    model: torch.nn.Module | None = None
    compiled: Callable[..., Any] | None = None
    refs: list[Any] = []  # per case: its outputs (on the host on a GPU), None when the case was skipped, or RECOMPUTE
    cases: list[Case] = []
    atol: float = 1e-4
    rtol: float = 1e-4
    strict: bool = True
    tainted: str = ""  # why this child must not be reused (a hand-over that failed past its description)
    pool: list[list[Any]] = []
    tol_args: tuple[Any, ...] = (None, None, None)  # (TOLERANCE, policy atol, policy rtol)
    tols: list[tuple[float, float]] = []  # (atol, rtol) per output, by its dtype
    precision: str = "fp32"  # the policy's allowance: loosens tolerances, and the baselines are timed with it
    flushes: bool = False  # its evaluations time with the L2 flush (set at setup: its figures before candidate code made the buffer)
    oracle: dict[str, Any] = {}  # step precision: {"case", "kept" (precision_guard.figures), "rows"} of the case with an oracle, or empty


S = _State()
KEEP_BYTES = 1 << 30  # reference outputs kept across a verdict's cases; past this they are recomputed when compared
HOST_COPY_BYTES_S = 4e9  # a conservative rate for copying a kept output from pageable host memory back to the GPU
RECOMPUTE: Any = "recompute"
# The near case's blindness check parks the answer on the unchanged inputs in host memory while it
# recomputes the near case's reference, when the round trip costs at most this long at
# HOST_COPY_BYTES_S (outputs up to 100 MB): _near_is_blind.
NEAR_PARK_S = 0.05
NULL_BEFORE_CALLS = 15  # empty calls timed at setup (step harness_overhead's cap)
HELD_BEFORE_MS = (0.1, 0.3, 1.0, 3.0, 10.0)  # lengths of the held calls timed at setup (step device_sync's cap)
HELD_BEFORE_CALLS = 8  # held calls per length at setup: about 0.12 s in all


def _problem_error(what: str, exc: BaseException | None = None) -> CommandError:
    detail = f": {describe(exc)}" if exc is not None else ""
    return CommandError("problem", f"{S.path}: {what}{detail}")


def _load_problem(path: str, size: str) -> str:
    """Import the problem at its size (problems.sizes); returns the sha256 of the text imported
    (the judge checks it)."""
    S.path = path
    source = Path(path).read_bytes()
    try:
        S.problem = inputs.import_file(path, "kw_problem", source, size=size)  # exactly the bytes hashed below
    except BaseException as exc:  # noqa: BLE001
        raise _problem_error("importing the problem failed", exc) from None
    folder = str(Path(path).resolve().parent)
    if folder in sys.path:
        sys.path.remove(folder)  # a folder others can write to must not serve later lazy imports
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(S.problem, n)]
    if missing:
        raise _problem_error(f"missing {', '.join(missing)} (a problem needs class Model, get_inputs() and get_init_inputs())")
    return hashlib.sha256(source).hexdigest()


def _forward(values: list[Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = S.model(*values)
    if S.device.type == "cuda":
        torch.cuda.synchronize()
    outs = correctness.as_output_list(out)
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise _problem_error(f"the reference's forward must return tensors, got {[type(o).__name__ for o in outs]}")
    return outs


def _checked(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except CommandError:
        raise
    except BaseException as exc:  # noqa: BLE001
        raise _problem_error(what, exc) from None


def setup(args: dict[str, Any]) -> dict[str, Any]:
    """Load and validate the problem; compute its metadata; check the reference is deterministic."""
    S.device = torch.device(args["device"])
    S.precision = args["precision"]
    pin_flags("fp32")  # references are strict whatever the allowance; only the baselines' timing gets it
    gpu_name = torch.cuda.get_device_name() if S.device.type == "cuda" else None  # before problem code could patch it (physics_floor reads it)
    versions = {"torch": str(torch.__version__), "cuda": torch.version.cuda}  # likewise (the baselines' machine key)
    source_hash = _load_problem(args["problem_path"], args.get("size") or "full")
    inputs.bind_generators(S.device)
    note_window(S.problem, S.device)  # the same draw as the candidate's child's (window.quiet_window)
    S.model = _checked("constructing Model(*get_init_inputs()) failed", lambda: inputs.init_model(S.problem, S.problem.Model, args["init_seed"], S.device))
    tol = getattr(S.problem, "TOLERANCE", None)
    if tol is not None and not (isinstance(tol, dict) and set(tol) <= {"atol", "rtol"}):
        raise _problem_error(f"TOLERANCE must be a dict with keys atol and/or rtol, got {tol!r}")
    S.tol_args = (tol, args["atol"], args["rtol"])
    S.strict = args["strict"]
    first = Case("native", args["init_seed"])
    meta = _metadata(first)
    S.tols = [resolve_tolerance(o["dtype"], *S.tol_args, S.precision) for o in meta["outputs"]]
    S.atol, S.rtol = S.tols[0]
    _check_deterministic(first)
    _give_back()
    gpu = {"gpu": gpu_name, "driver": _driver_version(), **lead_status(S.device)} if S.device.type == "cuda" else {}
    S.flushes = bool(S.device.type == "cuda" and (args.get("null_switches") or {}).get("flush"))
    if args.get("null_switches") and S.device.type == "cuda":
        # the empty call's time before any candidate code runs anywhere: the cap on what step
        # harness_overhead may subtract later, when candidate code could be loading the GPU
        synced: list[float] = []
        stream = timing.time_null(NULL_BEFORE_CALLS, cuda=True, switches=args["null_switches"], synced=synced)
        gpu["null_before_ms"] = statistics.median(stream)
        if len(synced) == len(stream):  # the host's round trip through the synchronize, nothing running
            gpu["null_tail_before_ms"] = statistics.median(s - t for s, t in zip(synced, stream))
        if gpu.get("lead_ok") and len(synced) == len(stream):
            # the same round trip after calls that hold the GPU for a known time (step device_sync's
            # held calls): the cap on the reference child's held tails during the rounds
            try:
                before = {}
                for ms in HELD_BEFORE_MS:
                    held: list[float] = []
                    s_held = timing.time_held(HELD_BEFORE_CALLS, ms * 1e3, cuda=True, switches=args["null_switches"], synced=held)
                    before[str(ms)] = statistics.median(d - t for t, d in zip(s_held, held))
                gpu["held_tail_before_ms"] = before
            except Exception as exc:  # noqa: BLE001 - without them the candidate's base is the empty call's (stricter)
                gpu["held_before_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return {**meta, "atol": S.atol, "rtol": S.rtol, "n_extra": _n_extra(), "source_hash": source_hash, **gpu, **versions}


def reset(args: dict[str, Any]) -> dict[str, Any]:
    """Between two evaluations of a warm reference child (judge.refpool): drop every output, input
    pool and compiled baseline of the last one and give its device memory back, the L2 flush
    buffer and cuBLAS's workspaces too; with `init_seed` (the reset when it is taken), construct
    Model afresh under the new evaluation's seed and make the flush buffer again, as a new child's
    setup would."""
    if S.tainted:
        raise CommandError("infra", f"not reused: {S.tainted}")
    S.refs, S.pool, S.oracle = [], [], {}
    pin_flags("fp32")  # as setup pinned them: nothing the last evaluation's baselines did carries over
    if S.compiled is not None:
        S.compiled = None
        importlib.import_module("torch._dynamo").reset()  # a fresh model compiles afresh, never past dynamo's recompile limit
    S.model = None
    if args.get("init_seed") is not None:
        S.model = _checked("constructing Model(*get_init_inputs()) failed",
                           lambda: inputs.init_model(S.problem, S.problem.Model, args["init_seed"], S.device))
    if S.device.type == "cuda":
        timing.release_flush()  # idle in the pool, the child holds its context only (judge.memory)
        torch.cuda.synchronize()
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()  # cuBLAS's workspaces, one per stream that ran a matmul: cuBLAS makes them again when next asked
        torch.cuda.empty_cache()
        if args.get("init_seed") is not None and S.flushes:
            # taken for an evaluation that times: the flush buffer is made now, before any of its candidate's code
            # runs, as a new child's setup makes it; made mid-rounds, it could meet a device a candidate had filled
            timing.flush_l2()
            torch.cuda.synchronize()
    return {"memory": _device_memory()}


def _device_memory() -> dict[str, int]:
    """What this child holds on its device (bytes): allocated by tensors, reserved by the caching allocator."""
    if S.device.type != "cuda":
        return {}
    return {"allocated": int(torch.cuda.memory_allocated()), "reserved": int(torch.cuda.memory_reserved())}


def _driver_version() -> str | None:
    """The NVIDIA kernel driver's version, as nvidia-smi reports it (read from /proc: no subprocess)."""
    try:
        text = open("/proc/driver/nvidia/version").read()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+([0-9][0-9.]+)", text)
    return m.group(1) if m else None


def references(args: dict[str, Any]) -> dict[str, Any]:
    """Compute and keep the reference outputs of every correctness case."""
    cases = [Case.from_dict(c) for c in args["cases"]]
    skipped = _compute_refs(cases)
    blind = [i for i, c in enumerate(cases) if c.kind == "near" and _near_is_blind(i)]
    t0, S.oracle = time.perf_counter(), {}
    note = _precision_oracle(args["oracle"]) if args.get("oracle") else None
    took = {"precision_s": round(time.perf_counter() - t0, 4)} if args.get("oracle") else {}
    _give_back()
    return {"skipped": skipped, "near_blind": blind, **({"precision_skipped": note} if note else {}), **took}


def _precision_oracle(spec: dict[str, Any]) -> str:
    """Step precision: the float64 oracle of case spec["case"] and the fp32 reference's error from it,
    kept for that case's comparison (judge.guards.precision); why not, when it cannot be."""
    i, where = int(spec["case"]), spec["where"]
    if S.refs[i] is None:
        return "the case was skipped (its reference is not finite)"
    values = inputs.make_inputs(S.problem, S.cases[i], S.device)
    try:
        outs = precision_guard.oracle_on(S.model, values, S.device if where == "device" else torch.device("cpu"))
    except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64 has no oracle
        S.tainted = f"the float64 oracle failed ({exc})"[:300] if error_kind(exc) == "cuda" else S.tainted  # then not reused
        return f"the reference model does not run in float64: {describe(exc)}"[:300]
    finally:
        del values
    rows, why, kept = precision_guard.figures(_case_refs(i), outs)
    del outs  # only the sampled values are kept (precision_guard.SAMPLE)
    if rows:
        S.oracle = {"case": i, "kept": kept, "rows": rows}
    return "" if rows else (why or "no float32 output")


def _give_back() -> None:
    """Return the allocator's cached blocks to the device: the inputs of every case computed are
    dead, and the candidate's child needs the room (judge.memory)."""
    if S.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _near_is_blind(i: int) -> bool:
    """Whether near case i's changes leave the reference within tolerance of the answer on the
    unchanged inputs: then a replay of that answer passes, and the step cannot catch one.

    The answer on the unchanged inputs is computed first, so its inputs and working set are gone
    before the near case's reference comes back to the device: the check holds I + X + O, then two
    outputs, not the near case's output beside a whole forward (I + X + 2 O; a new child's setup
    holds that much for the determinism check). A near reference that is recomputed needs its own
    forward, so the answer waits in host memory meanwhile when the round trip is cheap
    (NEAR_PARK_S); a larger one stays on the device."""
    if S.refs[i] is None:
        return True
    case = S.cases[i]
    first = _forward(inputs.raw_inputs(S.problem, Case("native", case.seed), S.device))
    parked = (S.device.type == "cuda" and S.refs[i] is RECOMPUTE
              and 2 * inputs.tensor_bytes(first) <= NEAR_PARK_S * HOST_COPY_BYTES_S)
    if parked:
        first = [o.to("cpu") for o in first]
    near_refs = _case_refs(i)
    if parked:
        first = [o.to(S.device) for o in first]
    return correctness.compare_outputs(near_refs, first, S.atol, S.rtol, strict=True, per_output=S.tols).ok


def _n_extra() -> int:
    fn = getattr(S.problem, "get_test_inputs", None)
    if fn is None:
        return 0
    lists = _checked("get_test_inputs() failed", lambda: fn())
    return len(lists)


def _metadata(case: Case) -> dict[str, Any]:
    cuda = S.device.type == "cuda"
    if cuda:  # the forward's own peak, inputs and outputs included (judge.memory's W)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        # the device's free memory before this child holds the problem's data: read after the forward, it would be
        # short by the inputs and outputs (an H100 said "62.02 GiB free" of 79.2 for KernelBench 45, 16 of them its input)
        free_before, _ = torch.cuda.mem_get_info()
    values = _checked("get_inputs() failed", lambda: inputs.make_inputs(S.problem, case, S.device))
    _dense_only("get_inputs() returned", values)
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        outs = _checked("the reference forward failed", lambda: _forward(values))
    _dense_only("the reference's forward returned", outs)
    params = inputs.tensor_bytes(list(S.model.parameters())) + inputs.tensor_bytes(list(S.model.buffers()))
    n_bytes = inputs.tensor_bytes(values) + inputs.tensor_bytes(outs) + params
    memory = {"input_bytes": inputs.tensor_bytes(values), "output_bytes": inputs.tensor_bytes(outs), "param_bytes": params}
    if cuda:
        torch.cuda.synchronize()
        _, total = torch.cuda.mem_get_info()
        memory.update(forward_peak_bytes=torch.cuda.max_memory_allocated() - base, device_total_bytes=total, device_free_bytes=free_before)
    return {
        "flops": int(counter.get_total_flops()),
        "bytes": int(n_bytes),
        "output_bytes": [_written_bytes(o, values) for o in outs],
        "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")} for o in outs],
        "memory": memory,
    }


def _dense_only(what: str, values: list[Any]) -> None:
    """A problem error for a tensor that is not dense (strided): the judge's input check, poison,
    hand-over and comparison read a tensor's bytes in place, which a sparse or other layout has not got."""
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor) and v.layout != torch.strided:
            raise _problem_error(f"{what} a tensor with layout {v.layout} at position {i}: the judge handles dense (strided) "
                                 "tensors only; make it dense in the problem (x.to_dense())")


def memory(args: dict[str, Any]) -> dict[str, Any]:
    """The device's free and total memory now, and what this process's allocator reserves: the
    trusted side of deciding whose an out-of-memory was (judge.memory)."""
    if S.device.type != "cuda":
        return {}
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"free_bytes": free, "total_bytes": total, "reserved_bytes": torch.cuda.memory_reserved()}


def _written_bytes(out: torch.Tensor, values: list[Any]) -> int:
    """Bytes an output occupies: its storage when that is smaller (expand, broadcast), 0 when it
    aliases an input (a view returns without writing)."""
    ptr = out.untyped_storage().data_ptr()
    if any(isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() == ptr for v in values):
        return 0
    return min(out.numel() * out.element_size(), out.untyped_storage().nbytes())


def _check_deterministic(case: Case) -> None:
    first = _forward(inputs.make_inputs(S.problem, case, S.device))
    second = _forward(inputs.make_inputs(S.problem, case, S.device))
    result = correctness.compare_outputs(first, second, S.atol, S.rtol, strict=True, per_output=S.tols)
    if not result.ok:
        raise _problem_error(f"the reference is not deterministic: two runs on the same seed differ ({result.message})")


def _compute_refs(cases: list[Case]) -> list[int]:
    """Reference outputs of every case; a non-native case whose reference is not finite is skipped.
    Outputs are kept while all kept so far fit in KEEP_BYTES, and past that recomputed when their
    comparison comes (_case_refs), so the judge's memory does not grow with the cases. On a GPU
    none is kept there (judge.memory): an output is kept in host memory when computing it took
    longer than copying it back would, and recomputed otherwise."""
    S.refs, S.cases, skipped, kept = [], cases, [], 0
    cuda = S.device.type == "cuda"
    for i, case in enumerate(cases):
        t0 = time.perf_counter()
        outs = _checked(f"the reference failed on case {case.id}", lambda: _forward(inputs.make_inputs(S.problem, case, S.device)))
        finite = all(bool(torch.isfinite(o).all()) for o in outs if o.is_floating_point())
        if cuda:
            torch.cuda.synchronize()
        took = time.perf_counter() - t0  # the case's inputs and forward: what a recompute costs
        if not finite and case.kind in ("normal", "uniform", "large"):
            S.refs.append(None)
            skipped.append(i)
            continue
        size = inputs.tensor_bytes(outs)
        if kept + size <= KEEP_BYTES and (not cuda or took > size / HOST_COPY_BYTES_S):
            S.refs.append([o.detach().to("cpu") if cuda else o.detach().clone() for o in outs])
            kept += size
        else:
            S.refs.append(RECOMPUTE)
        del outs
    return skipped


def _case_refs(i: int) -> list[torch.Tensor]:
    """Case i's reference outputs on the device: kept, or computed again on the case's inputs (the
    reference was checked deterministic within the tolerance at setup)."""
    refs = S.refs[i]
    assert refs is not None, "compare on a skipped case"
    if refs is RECOMPUTE:
        case = S.cases[i]
        return _checked(f"the reference failed on case {case.id}", lambda: _forward(inputs.make_inputs(S.problem, case, S.device)))
    if S.device.type == "cuda":
        return [r.to(S.device) for r in refs]
    return refs


def degeneracy(args: dict[str, Any]) -> dict[str, Any]:
    """Tricks that a degenerate problem would accept (the degeneracy gate, judge.degeneracy).

    For every case, the reference output against: itself (constant, all zero), the output under
    the next case's inputs (another seed), zeros, and each input of the same shape and dtype (the
    identity). A trick counts where it passes on every case of a group: the native cases
    (get_inputs() as written, under the seeds) or the judge's other distributions."""
    cases = [Case.from_dict(c) for c in args["cases"]]
    outs = [_checked(f"the reference failed on case {c.id}", lambda c=c: _forward(inputs.make_inputs(S.problem, c, S.device))) for c in cases]
    values = [inputs.make_inputs(S.problem, c, S.device) for c in cases]
    passes: dict[str, list[bool]] = {}

    def note(check: str, ok: bool) -> None:
        passes.setdefault(check, []).append(bool(ok))

    group_of = ["native" if c.kind in ("native", "near") else "other" for c in cases]
    for i, ref in enumerate(outs):
        peers = [j for j in range(len(cases)) if group_of[j] == group_of[i]]
        other = outs[peers[(peers.index(i) + 1) % len(peers)]]  # the next case of the same group
        for k, o in enumerate(ref):  # every check per output: one degenerate output of several counts
            tol = [S.tols[k]] if k < len(S.tols) else None

            def fits(trial: Any, o: torch.Tensor = o, tol: Any = tol) -> bool:
                return correctness.compare_outputs([o], [trial], S.atol, S.rtol, True, tol).ok

            same = [v for v in values[i] if isinstance(v, torch.Tensor) and v.shape == o.shape and v.dtype == o.dtype]
            note(f"constant_output:{k}", o.numel() > 1 and bool((o == o.reshape(-1)[0]).all()))
            note(f"all_zero_output:{k}", bool((o == 0).all()))
            note(f"input_independent:{k}", other is not ref and torch.equal(o, other[k]))
            note(f"another_seed_passes:{k}", other is not ref and fits(other[k]))
            note(f"zeros_pass:{k}", fits(torch.zeros_like(o)))
            note(f"identity_passes:{k}", any(fits(v) for v in same))
    groups = [("native", [c.kind == "native" for c in cases]), ("distributions", [c.kind not in ("native", "extra", "near") for c in cases])]
    result = {}
    for check, flags in passes.items():
        result[check] = {name: bool(any(mask) and all(f for f, m in zip(flags, mask) if m)) for name, mask in groups}
    return {"checks": result, "cases": [c.id for c in cases]}


def handlers() -> dict[str, Callable[[dict[str, Any]], Any]]:
    # the commands the other modules hold read this module's state: imported once it is whole
    from kernelwright.judge import reference_checks, reference_compare, reference_timing

    return {
        "setup": setup, "references": references, "memory": memory, "degeneracy": degeneracy, "reset": reset,
        **reference_compare.handlers(), **reference_timing.handlers(), **reference_checks.handlers(),
    }
