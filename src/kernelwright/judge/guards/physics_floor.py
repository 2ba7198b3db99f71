"""Guard physics_floor: a time below the write floor (the output bytes at the GPU's peak
bandwidth) is refused, since no correct kernel can write its output faster; a time under
DESIGN.md's full floor (the reference's bytes and FLOPs) but above the write floor is reported,
not refused. The peaks are the GPU's own (roofline.peaks_for, by the name the reference child
reports); the refusal never takes a bandwidth under the H200's, the figure it was checked at (an
output that fits in L2 may be written faster than memory takes it: benchmarks/write_floor_bench.py
measures that), and on a GPU the table lacks it takes the highest bandwidth in the table."""

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


def floor_and_efficiency(meta: dict[str, Any], runtime_ms: float, precision: str,
                         peaks: roofline.Peaks | None = None) -> tuple[float, float, float | None]:
    """(physics floor, write floor, efficiency) for a measured runtime.

    The physics floor is DESIGN.md's max(bytes / peak bandwidth, FLOPs / peak rate) for the
    reference's work at the GPU's peaks (the H200's where its name is not known); the write floor
    counts only the output bytes, which every correct kernel must write, at write_bandwidth's
    figure. Efficiency uses the measured ceiling (the H200's) of the output dtype's matrix rate
    (half types) or of the policy's precision.
    """
    peaks = peaks or roofline.peaks_for(meta.get("gpu"))
    floor = roofline.floor_ms(meta["bytes"], meta["flops"], peaks)
    write_floor = sum(meta.get("output_bytes", [])) / write_bandwidth(peaks) * 1e3
    dtype = (meta.get("outputs") or [{}])[0].get("dtype", "float32")
    eff = roofline.efficiency(meta["bytes"], meta["flops"], CEILING_BY_DTYPE.get(dtype, precision), runtime_ms)
    return floor, write_floor, eff


def write_bandwidth(peaks: roofline.Peaks) -> float:
    """The bandwidth the write floor divides by: the GPU's peak, never under the H200's (the figure
    the refusal was checked at on GPUs); the table's highest for a GPU it lacks."""
    if not peaks.known:
        return max(bw for _, bw, _ in roofline.GPU_PEAKS)
    return max(peaks.bytes_per_s, roofline.VENDOR_BYTES_PER_S)


def apply(flow: Any) -> None:
    """Refuse a time below the write floor (the output bytes at peak bandwidth: no correct kernel
    can beat it). Under DESIGN.md's full floor (the reference's bytes and FLOPs) but above the write
    floor is reported, not refused: a better algorithm (diag(a) @ b as a row scaling) may do less
    work than the reference."""
    vb, meta = flow.vb, flow.meta
    runtime = vb.numbers["runtime_ms"]
    peaks = roofline.peaks_for(meta.get("gpu"))
    floor, write_floor, eff = floor_and_efficiency(meta, runtime, flow.policy.precision, peaks)
    vb.numbers["floor_ms"] = floor
    cpu = "" if flow.device == "cuda" else "CPU backend: the floor is an H200 figure; CPU times are never claims"
    if not vb.off_or("physics_floor", cpu):
        return
    vb.numbers["efficiency"] = eff
    at = f"{peaks.gpu} peaks" if peaks.known else f"H200 peaks: {meta.get('gpu') or 'this GPU'} is not in the judge's table"
    floor_text = f"floor {floor:.4g} ms ({meta['bytes']} bytes, {meta['flops']} FLOPs; {at})"
    fired = runtime < write_floor
    detail = (f"runtime {runtime:.4g} ms; write floor {write_floor:.4g} ms (output bytes at {write_bandwidth(peaks) / 1e12:g} TB/s); "
              f"{floor_text}")
    if not fired and runtime < floor:
        detail += "; under the reference-work floor: less work than the reference does (reported, not refused)"
    vb.step("physics_floor", True, detail)
    vb.guard("physics_floor", fired, detail)
    if fired:
        raise Stop(Status.REJECTED, f"faster than physics allows: {detail}")
