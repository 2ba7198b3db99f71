"""Every protocol step of DESIGN.md, in the order a verdict lists them. Each may be switched off
for ablation tests (Policy.disabled_steps)."""

from __future__ import annotations

from kernelwright.judge.guards.spec import StepSpec

_C, _T = "correctness", "timing"
STEPS: tuple[StepSpec, ...] = (
    StepSpec("seeds", _C, "several secret seeds, not one"),
    StepSpec("near_duplicate", _C, "a call on fresh inputs, then on the same tensors with a few elements changed in place"),
    StepSpec("distributions", _C, "normal, uniform [-1, 1] and large-magnitude inputs besides get_inputs()"),
    StepSpec("extra_shapes", _C, "the problem's get_test_inputs()"),
    StepSpec("inputs_unchanged", _C, "inputs cloned and checked unchanged after the call"),
    StepSpec("poison", _C, "free memory filled with NaN before every candidate call"),
    StepSpec("output_checks", _C, "exactly torch.Tensor, exact shape and dtype, all finite"),
    StepSpec("numerics_flags", _C, "TF32 / cuDNN flags pinned and checked unchanged"),
    StepSpec("function_identities", _C, "timing, checking and judge functions unchanged after import and every call"),
    StepSpec("op_audit", _C, "one forward under a dispatch mode: torch compute refused unless the policy allows it"),
    StepSpec("precision", _C, "fp32 policy: the error from a float64 oracle within reach of the fp32 reference's own"),
    StepSpec("timed_recheck", _C, "outputs of timed calls compared with the reference too"),
    StepSpec("between_calls", _C, "no hook of the candidate's set, nor a Python thread of its alive, when a timed call's seed is asked for"),
    StepSpec("l2_flush", _T, "L2 flushed before every timed call"),
    StepSpec("cuda_events", _T, "CUDA events around each call"),
    StepSpec("device_sync", _T, "device-wide synchronize before the end event"),
    StepSpec("fresh_inputs", _T, "fresh input values per timed call, written into a pool of input sets (three, fewer for inputs of GiBs)"),
    StepSpec("warmup", _T, "time-based warm-up"),
    StepSpec("adaptive_stop", _T, "stop on the standard error, between a minimum and maximum count"),
    StepSpec("interleave", _T, "baselines and candidate timed in alternating rounds"),
    StepSpec("harness_overhead", _T, "the protocol around an empty call, timed in both children, subtracted from every contender"),
    StepSpec("amortized_time", _T, "the candidate's trimmed mean replaces its median where its time sits in a minority of calls"),
    StepSpec("wall_clock_check", _T, "judge-side wall clock around whole batches"),
    StepSpec("profiler_check", _T, "kernel-time sum from the torch profiler for one call"),
    StepSpec("kernel_provenance", _T, "the profiled call's GPU time by origin: torch and libraries only as the policy allows"),
    StepSpec("physics_floor", _T, "refuse times below the write floor (output bytes at the GPU's peak bandwidth, never under the H200's 4.8 TB/s)"),
)
CORRECTNESS_STEPS = tuple(s.name for s in STEPS if s.phase == _C)
TIMING_STEPS = tuple(s.name for s in STEPS if s.phase == _T)
ALL_STEPS = CORRECTNESS_STEPS + TIMING_STEPS
