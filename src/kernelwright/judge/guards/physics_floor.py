"""Guard physics_floor: a time below the write floor (the output bytes at the H200's peak bandwidth)
is refused, since no correct kernel can write its output faster; a time under DESIGN.md's full
floor (the reference's bytes and FLOPs) but above the write floor is reported, not refused."""

from __future__ import annotations

from typing import Any

from kernelwright.judge import roofline
from kernelwright.judge.guards.spec import GuardSpec
from kernelwright.core.records import Status
from kernelwright.judge.verdicts import Stop

SPEC = GuardSpec(
    name="physics_floor", step="physics_floor", phases=("pricing",),
    watches="the candidate's price against the write floor and the reference-work floor",
    finding="the runtime, both floors, the bytes and FLOPs", refusal="rejected",
    proofs=("tests/test_timing_guards.py::test_gpu_physics_floor_refuses_a_patched_event_timer_when_the_wall_clock_is_off",),
    accepts=("tests/test_timing_guards.py::test_gpu_timing_guards_accept_an_honest_kernel", "relu_cuda"),
    cuda_only=True,
)


CEILING_BY_DTYPE = {"bfloat16": "bf16", "float16": "fp16"}


def floor_and_efficiency(meta: dict[str, Any], runtime_ms: float, precision: str) -> tuple[float, float, float | None]:
    """(physics floor, write floor, efficiency) for a measured runtime.

    The physics floor is DESIGN.md's max(bytes / peak bandwidth, FLOPs / peak rate) for the
    reference's work; the write floor counts only the output bytes, which every correct kernel must
    write. Efficiency uses the measured ceiling of the output dtype's matrix rate (half types) or of
    the policy's precision.
    """
    floor = roofline.floor_ms(meta["bytes"], meta["flops"])
    write_floor = roofline.floor_ms(sum(meta.get("output_bytes", [])), 0)
    dtype = (meta.get("outputs") or [{}])[0].get("dtype", "float32")
    eff = roofline.efficiency(meta["bytes"], meta["flops"], CEILING_BY_DTYPE.get(dtype, precision), runtime_ms)
    return floor, write_floor, eff


def apply(flow: Any) -> None:
    """Refuse a time below the write floor (the output bytes at peak bandwidth: no correct kernel
    can beat it). Under DESIGN.md's full floor (the reference's bytes and FLOPs) but above the write
    floor is reported, not refused: a better algorithm (diag(a) @ b as a row scaling) may do less
    work than the reference."""
    vb, meta = flow.vb, flow.meta
    runtime = vb.numbers["runtime_ms"]
    floor, write_floor, eff = floor_and_efficiency(meta, runtime, flow.policy.precision)
    vb.numbers["floor_ms"] = floor
    cpu = "" if flow.device == "cuda" else "CPU backend: the floor is an H200 figure; CPU times are never claims"
    if not vb.off_or("physics_floor", cpu):
        return
    vb.numbers["efficiency"] = eff
    fired = runtime < write_floor
    detail = (f"runtime {runtime:.4g} ms; write floor {write_floor:.4g} ms (output bytes); "
              f"floor {floor:.4g} ms ({meta['bytes']} bytes, {meta['flops']} FLOPs)")
    if not fired and runtime < floor:
        detail += "; under the reference-work floor: less work than the reference does (reported, not refused)"
    vb.step("physics_floor", True, detail)
    vb.guard("physics_floor", fired, detail)
    if fired:
        raise Stop(Status.REJECTED, f"faster than physics allows: {detail}")
