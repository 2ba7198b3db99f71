"""The filters by execution, run on one candidate task inside a synthesis worker process.

Stages, in order; the first that fails rejects the task and names the reason:

- compose: the seeded composer drew an operator stack (compose.compose);
- shape: the model builds and runs on meta tensors, its output has the shape the operators' rules
  predicted, and a batch size is chosen so the runtime proxy lands on a target drawn inside the window
  (memory permitting);
- runtime (CPU): the calibrated proxy lies in the window. On a GPU the eager time is measured instead,
  as the last stage, by one worker after the others have finished their checks;
- contaminated: AST similarity to a benchmark program at or above the threshold;
- eager: the problem loads as the judge loads it (its reference child's setup), builds and runs;
- deterministic: two runs on one seed agree (the judge's own check, at its tolerance), and so do
  repeated forwards on the same tensors without reseeding;
- compile: torch.compile of the model gives the eager outputs (aot_eager on a CPU: graph capture and
  decomposition; inductor on a GPU);
- degenerate: the judge's degeneracy gate (judge.degeneracy) finds no trick that passes.

On a CPU the execution stages run the task's small-scale text (compose.Spec.render(scale="small"));
on a GPU they run the exported text. Duplicates are removed by the parent, which sees every task.
This module's functions run task code, so only worker processes call them, never the CLI's process.
The execution stages are the reference child's own commands, called in the worker (a confined
process of its own, synth.pool): judge.child_reference's `setup` and `degeneracy`, and
judge.reference_checks' `repeat`, `compiled`, `time_eager` and `release`; nothing of the child's
state is read here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

STAGES = ("compose", "shape", "runtime", "contaminated", "eager", "deterministic", "compile", "degenerate", "duplicate")
MAX_TENSOR_BYTES = 2 << 30  # no tensor of a task above 2 GiB
MAX_OUT_BYTES = 48 << 30  # the outputs of all its operators together under 48 GiB
MAX_BATCH = 4096  # KernelBench's largest batches are of this order
TIMED_CALLS = 5  # eager calls timed on a GPU (after 2 warm-up calls)


class Rejected(Exception):
    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(reason)
        self.stage = stage


class Clock:
    """Seconds spent per stage."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


def examine(job: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """One candidate through its phase's stages; never raises for a rejected task.

    job["phase"]: "all" (every stage; on a CPU), "check" (every stage but the measured runtime; GPU
    workers in parallel) or "time" (load and time the eager model alone; one GPU worker)."""
    clock = Clock()
    phase = job.get("phase", "all")
    result: dict[str, Any] = {"index": job["index"], "phase": phase, "status": "rejected", "stage": None, "reason": "", "task": None,
                              "retry": bool(job.get("retry"))}
    if job.get("rejected"):  # the composer already failed (an LLM reply with no program)
        return dict(result, task=job.get("task"), seconds={}, **job["rejected"])
    try:
        task = _composed(job, ctx, clock) if job.get("source") is None else _sourced(job, ctx, clock)
        task["device"] = ctx["device"]  # where the filters ran
        task.setdefault("measured_ms", None)
        result["task"] = task
        if phase == "time":
            _time_phase(task, job, ctx, clock)
        else:
            _execute(task, job, ctx, clock)
        result["status"] = "accepted"
    except Rejected as exc:
        oom = "OutOfMemoryError" in str(exc) or "out of memory" in str(exc)  # the machine's limit, not the task's fault
        result["stage"], result["reason"] = "error" if oom else exc.stage, str(exc)[:500]
    except Exception as exc:  # noqa: BLE001 - a failure of the machinery (out of memory, say), not a verdict on the task
        result["stage"], result["reason"] = "error", f"{type(exc).__name__}: {str(exc)[:400]}"
    result["seconds"] = {k: round(v, 4) for k, v in clock.seconds.items()}
    return result


def _sourced(job: dict[str, Any], ctx: dict[str, Any], clock: Clock) -> dict[str, Any]:
    """A task whose source is given: an exported set filtered again, or an LLM composer's answer.
    The meta run (stage shape) holds it to the memory caps and gives its proxy."""
    task = {k: v for k, v in (job.get("task") or {}).items() if k != "file"}
    task["source"] = job["source"]
    task.setdefault("hash", hashlib.sha256(job["source"].encode()).hexdigest())
    if job.get("phase", "all") == "time":
        return task
    with clock.stage("shape"):
        cost = _meta_cost(job["source"], None)
        _within_memory(cost)
    # the proxy as this run's classes and calibration give it (a record's own may come from another calibration)
    task.update(proxy_raw_ms=round(cost.proxy_ms, 5), flops=cost.flops, bytes=cost.bytes, kernels=cost.kernels,
                proxy_parts={k: round(v, 6) for k, v in cost.parts}, proxy_ms=round(_calibrated(cost, ctx), 5))
    return task


def _composed(job: dict[str, Any], ctx: dict[str, Any], clock: Clock) -> dict[str, Any]:
    from kernelwright.synth.compose import compose

    with clock.stage("compose"):
        spec = compose(job["seed"], job["index"], job.get("weights"))
        if spec is None:
            raise Rejected("compose", "no operator stack could be drawn")
    with clock.stage("shape"):
        batch, cost = _size(spec, job, ctx)
    task = {"id": spec.task_id, "index": spec.index, "seed": spec.seed, "name": spec.name, "ops": spec.ops,
            "n_ops": len(spec.steps), "level": 1 if len(spec.steps) == 1 else 2, "layout": spec.layout, "batch": batch,
            "source": spec.render(batch), "check_source": spec.render(batch, "small"),
            "proxy_raw_ms": round(cost.proxy_ms, 5), "flops": cost.flops, "bytes": cost.bytes, "kernels": cost.kernels}
    task["hash"] = hashlib.sha256(task["source"].encode()).hexdigest()
    task["proxy_ms"] = round(_calibrated(cost, ctx), 5)
    task["proxy_parts"] = {k: round(v, 6) for k, v in cost.parts}
    return task


def _calibrated(cost: Any, ctx: dict[str, Any]) -> float:
    from kernelwright.synth.cost import calibrated_ms

    return calibrated_ms(cost, ctx["calibration"])


def _within_memory(cost: Any) -> None:
    if cost.max_tensor_bytes > MAX_TENSOR_BYTES:
        raise Rejected("shape", f"a tensor of {cost.max_tensor_bytes / 2**30:.1f} GiB exceeds the cap of {MAX_TENSOR_BYTES / 2**30:g} GiB")
    if cost.out_bytes > MAX_OUT_BYTES:
        raise Rejected("shape", f"the operators' outputs take {cost.out_bytes / 2**30:.1f} GiB, over the cap of {MAX_OUT_BYTES / 2**30:g} GiB")


def size_target(seed: int, index: int, window: tuple[float, float] | list[float]) -> float:
    """The eager time candidate (seed, index) is sized for: log-uniform in [2 low, high / 3]."""
    lo, hi = window
    rng = random.Random(f"kernelwright-synth:{seed}:{index}:size")
    return math.exp(rng.uniform(math.log(lo * 2), math.log(hi / 3)))


def max_batch(cost1: Any) -> int:
    """The largest batch the caps allow, from the cost at batch 1 (activations grow linearly with it)."""
    return max(1, min(MAX_BATCH, MAX_TENSOR_BYTES // max(cost1.max_tensor_bytes, 1), MAX_OUT_BYTES // max(cost1.out_bytes, 1)))


def _size(spec: Any, job: dict[str, Any], ctx: dict[str, Any]) -> tuple[int, Any]:
    """Batch size for a target eager time drawn log-uniformly inside the window: the smallest batch
    whose calibrated proxy, measured on meta tensors at that batch, reaches the target (memory
    permitting). Each step of the bisection is a meta run of its own (a few ms), since weights and
    launches do not grow with the batch and GEMMs turn from memory- to compute-bound as it grows."""
    cost1 = _meta_cost(spec.render(1), (1,) + spec.out.full[1:])
    target = size_target(spec.seed, spec.index, job["window"])
    _within_memory(cost1)
    top = max_batch(cost1)
    costs = {1: cost1}

    def at(batch: int) -> Any:
        if batch not in costs:
            costs[batch] = _meta_cost(spec.render(batch), (batch,) + spec.out.full[1:])
        return costs[batch]

    low, high = 1, top  # calibrated time grows with the batch: bisect for the first batch at the target
    while low < high:
        mid = (low + high) // 2
        if _calibrated(at(mid), ctx) >= target:
            high = mid
        else:
            low = mid + 1
    cost = at(low)
    _within_memory(cost)
    return low, cost


def _meta_cost(source: str, expect: tuple[int, ...] | None) -> Any:
    import torch

    from kernelwright.core.records import MODULE_MODE
    from kernelwright.synth.cost import measure

    namespace: dict[str, Any] = {"__name__": "kw_synth_meta"}
    try:
        exec(compile(source, "<synth task>", "exec"), namespace)  # noqa: S102 - composed task code, in a worker process
        with torch.device("meta"):
            model = namespace["Model"](*namespace["get_init_inputs"]()).train(MODULE_MODE == "train")  # as the judge builds it
            values = namespace["get_inputs"]()
        cost, outs = measure(model, values)
        biggest_input = max((v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor)), default=0)
        cost = dataclasses.replace(cost, max_tensor_bytes=max(cost.max_tensor_bytes, biggest_input))
    except Exception as exc:  # noqa: BLE001 - any failure is this stage's rejection
        raise Rejected("shape", f"the model fails on meta tensors: {type(exc).__name__}: {exc}") from None
    got = tuple(outs[0].shape) if outs and isinstance(outs[0], torch.Tensor) else None
    if got is None:
        raise Rejected("shape", "the model's forward returns no tensor")
    if expect is not None and got != tuple(expect):
        raise Rejected("shape", f"output shape {got} differs from the rules' {tuple(expect)}")
    return cost


def _execute(task: dict[str, Any], job: dict[str, Any], ctx: dict[str, Any], clock: Clock) -> None:
    if not ctx.get("timed") and task.get("proxy_ms") is not None:
        with clock.stage("runtime"):
            lo, hi = job["window"]
            if not lo <= task["proxy_ms"] <= hi:
                raise Rejected("runtime", f"proxy eager time {task['proxy_ms']:.3g} ms outside [{lo:g}, {hi:g}] ms")
    with clock.stage("contaminated"):
        _decontaminate(task, ctx)
    source = task["source"] if ctx["device"] == "cuda" or not task.get("check_source") else task["check_source"]
    with tempfile.TemporaryDirectory(prefix="kw-synth-") as tmp:
        path = Path(tmp) / f"{task.get('name', 'task')[:80]}.py"
        path.write_text(source)
        _run_checks(str(path), task, job, ctx, clock)


def _decontaminate(task: dict[str, Any], ctx: dict[str, Any]) -> None:
    from kernelwright.problems.similarity import bounded_ratio, tokens

    mine = tokens(task["source"])
    best, matches = None, []
    for name, theirs in ctx["against"].items():
        r = bounded_ratio(mine, theirs, ctx["threshold"])
        if r is None:
            continue  # the lengths or the token multisets alone keep it under the threshold
        best = max(best or (name, r), (name, r), key=lambda p: p[1])
        if r >= ctx["threshold"]:
            matches.append({"reference": name, "similarity": round(r, 4)})
    # the nearest reference among those whose bounds reached the threshold (None: every one was below it by a bound)
    task["nearest_reference"] = {"reference": best[0], "similarity": round(best[1], 4)} if best else None
    if matches:
        task["contamination"] = sorted(matches, key=lambda d: -d["similarity"])
        raise Rejected("contaminated", f"AST similarity {matches[0]['similarity']:.3f} to {matches[0]['reference']}")


def _run_checks(path: str, task: dict[str, Any], job: dict[str, Any], ctx: dict[str, Any], clock: Clock) -> None:
    from kernelwright.judge import child_reference as ref
    from kernelwright.judge.child import CommandError

    seeds = job.get("seeds") or [1, 2, 3]
    args = {"problem_path": path, "device": ctx["device"], "precision": "fp32", "init_seed": seeds[0],
            "atol": ctx["atol"], "rtol": ctx["rtol"], "strict": True}
    try:
        with clock.stage("eager"):
            try:
                ref.setup(args)  # imports, builds, runs, and checks two runs agree, as the judge does
            except CommandError as exc:
                raise Rejected("deterministic" if "not deterministic" in str(exc) else "eager", str(exc)) from None
        with clock.stage("deterministic"):
            _repeat_check(seeds[0])
        with clock.stage("compile"):
            _compile_check(seeds[0], ctx["backend"])
        with clock.stage("degenerate"):
            _degeneracy(ref, seeds)
    finally:
        _release()


def _time_phase(task: dict[str, Any], job: dict[str, Any], ctx: dict[str, Any], clock: Clock) -> None:
    """The GPU's runtime stage, in a worker that has the GPU alone: load the exported text, time its
    eager forward, hold it to the window."""
    from kernelwright.judge import child_reference as ref
    from kernelwright.judge.child import CommandError

    seed = (job.get("seeds") or [1])[0]
    with tempfile.TemporaryDirectory(prefix="kw-synth-") as tmp, clock.stage("runtime"):
        path = Path(tmp) / "task.py"
        path.write_text(task["source"])
        try:
            ref.setup({"problem_path": str(path), "device": ctx["device"], "precision": "fp32", "init_seed": seed,
                       "atol": ctx["atol"], "rtol": ctx["rtol"], "strict": True})
            task["measured_ms"] = round(_time_eager(seed), 5)
        except CommandError as exc:
            raise Rejected("runtime", f"the task failed when loaded for timing: {exc}") from None
        finally:
            _release()
    lo, hi = job["window"]
    if not lo <= task["measured_ms"] <= hi:
        raise Rejected("runtime", f"eager time {task['measured_ms']:.3g} ms on the GPU outside [{lo:g}, {hi:g}] ms")


def _release() -> None:
    from kernelwright.judge import reference_checks

    reference_checks.release({})


def _repeat_check(seed: int) -> None:
    """Three forwards on the same input tensors with no reseeding between them must agree (the judge's
    own check reseeds before each run, so a forward drawing random numbers could pass it)."""
    from kernelwright.judge import reference_checks

    res = reference_checks.repeat({"seed": seed})
    if not res["ok"]:
        raise Rejected("deterministic", f"two forwards on the same inputs differ: {res['message']}")


def _compile_check(seed: int, backend: Any) -> None:
    from kernelwright.judge import reference_checks

    res = reference_checks.compiled({"seed": seed, "backend": backend})
    if res["error"]:
        raise Rejected("compile", f"torch.compile (backend {backend}) failed: {res['error']}")
    if not res["ok"]:
        raise Rejected("compile", f"torch.compile (backend {backend}) disagrees with eager: {res['message']}")


def _degeneracy(ref: Any, seeds: list[int]) -> None:
    from kernelwright.judge.child import CommandError
    from kernelwright.judge.evaluate import correctness_cases
    from kernelwright.judge.policy import Policy
    from kernelwright.judge.degeneracy import findings_of

    cases = [c for c in correctness_cases(seeds, Policy(seeds=tuple(seeds)), 0) if c.kind != "near"]
    try:
        reply = ref.degeneracy({"cases": [c.to_dict() for c in cases]})
    except CommandError as exc:
        raise Rejected("degenerate", f"the gate's cases failed: {exc}") from None
    native = [f for f in findings_of(reply) if f["native"]]
    if native:
        raise Rejected("degenerate", "; ".join(f["detail"] for f in native))


def _time_eager(seed: int) -> float:
    """Median eager milliseconds over TIMED_CALLS calls, with the judge's timing function (L2 flushed,
    CUDA events, device-wide sync)."""
    from kernelwright.judge import reference_checks

    return reference_checks.time_eager({"seed": seed, "calls": TIMED_CALLS})["median_ms"]
