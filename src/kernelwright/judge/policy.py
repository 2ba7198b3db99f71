"""Policy: what counts as correct and fair for one evaluation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Every protocol step of DESIGN.md, by name. Each may be switched off for ablation tests.
CORRECTNESS_STEPS = (
    "seeds",  # several secret seeds, not one
    "near_duplicate",  # a call on fresh inputs, then on the same tensors with a few elements changed in place
    "distributions",  # normal, uniform [-1, 1] and large-magnitude inputs besides get_inputs()
    "extra_shapes",  # the problem's get_test_inputs()
    "inputs_unchanged",  # inputs cloned and checked unchanged after the call
    "poison",  # free memory filled with NaN before every candidate call
    "output_checks",  # exactly torch.Tensor, exact shape and dtype, all finite
    "numerics_flags",  # TF32 / cuDNN flags pinned and checked unchanged
    "function_identities",  # timing, checking and judge functions unchanged after import and every call
    "op_audit",  # one forward under a dispatch mode: torch compute refused unless the policy allows it
    "precision",  # fp32 policy: error from a float64 oracle within reach of the fp32 reference's own (judge.precision_guard)
    "timed_recheck",  # outputs of timed calls compared with the reference too
    "between_calls",  # no hook of the candidate's set, nor a Python thread of its alive, when a timed call's seed is asked for
)
TIMING_STEPS = (
    "l2_flush",  # L2 flushed before every timed call
    "cuda_events",  # CUDA events around each call
    "device_sync",  # device-wide synchronize before the end event
    "fresh_inputs",  # fresh input values per timed call, written into a pool of input sets (three, fewer for inputs of GiBs)
    "warmup",  # time-based warm-up
    "adaptive_stop",  # stop on the standard error, between a minimum and maximum count
    "interleave",  # baselines and candidate timed in alternating rounds
    "harness_overhead",  # the protocol around an empty call, timed in both children, subtracted from every contender
    "amortized_time",  # the candidate's trimmed mean replaces its median where its time sits in a minority of calls
    "wall_clock_check",  # judge-side wall clock around whole batches
    "profiler_check",  # kernel-time sum from the torch profiler for one call
    "kernel_provenance",  # the profiled call's GPU time by origin: torch and libraries only as the policy allows
    "physics_floor",  # refuse times below the H200 physics floor
)
ALL_STEPS = CORRECTNESS_STEPS + TIMING_STEPS
NEAR_POSITIONS = 8  # elements changed per floating input in the near_duplicate case (judge.inputs.perturb)

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
DISTRIBUTIONS = ("normal", "uniform", "large")
BASELINE_MODES = ("measured", "cached", "skip")
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")  # torch.compile modes the compile baseline may use

# Default tolerance per output dtype: atol is scaled by max(1, rms(reference)), rtol is per element.
DEFAULT_TOLERANCE = {
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float64": {"atol": 1e-8, "rtol": 1e-8},
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
}


DEFAULT_BUDGET_S = {"cuda": 20.0, "cpu": 5.0}  # the timing phase's budget when the policy names none


@dataclass(frozen=True, kw_only=True)
class TimingConfig:
    """How long and how often to time."""

    warmup_ms: float = 250.0  # time-based warm-up per contender before timed calls (lets GPU clocks settle)
    min_runs: int = 20  # never stop before this many timed calls per contender
    max_runs: int = 400  # never time more calls than this per contender
    batch: int = 10  # timed calls per contender per interleaved round
    target_rel_sem: float = 0.005  # stop when standard error of the median estimate / median falls below
    # wall-clock budget for the timing phase; None: DEFAULT_BUDGET_S for the device (CPU times are
    # never claims, so the CPU stops sooner)
    budget_s: float | None = None
    # consecutive timed calls per re-check round whose outputs are compared with the reference; two,
    # because work deferred to a later call leaves at least one of any two consecutive outputs unwritten
    recheck: int = 2
    lead_us: float = 200.0  # GPU spin before each start event, so host launch latency is not timed (0: off)

    def __post_init__(self) -> None:
        if self.min_runs < 1 or self.max_runs < self.min_runs:
            raise ValueError(f"need 1 <= min_runs <= max_runs, got {self.min_runs}, {self.max_runs}")
        if self.batch < 1:
            raise ValueError(f"batch must be positive, got {self.batch}")
        if self.warmup_ms < 0 or (self.budget_s is not None and self.budget_s <= 0):
            raise ValueError(f"warmup_ms >= 0 and budget_s > 0 needed, got {self.warmup_ms}, {self.budget_s}")
        if not 0 < self.target_rel_sem < 1:
            raise ValueError(f"target_rel_sem must be in (0, 1), got {self.target_rel_sem}")
        if not 0 <= self.lead_us <= 10_000:
            raise ValueError(f"lead_us must be in [0, 10000], got {self.lead_us}")
        if self.recheck < 0:
            raise ValueError(f"recheck must be >= 0, got {self.recheck}")

    def budget_for(self, cuda: bool) -> float:
        """The timing phase's budget in seconds on this device."""
        return self.budget_s if self.budget_s is not None else DEFAULT_BUDGET_S["cuda" if cuda else "cpu"]


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What counts as correct and fair. Validated on construction; errors carry the values."""

    precision: str = "fp32"  # strict fp32 unless asked; the baselines get the same allowance
    atol: float | None = None  # overrides the problem's and the dtype default
    rtol: float | None = None  # overrides the problem's and the dtype default
    n_seeds: int = 3  # secret seeds for correctness
    seeds: tuple[int, ...] | None = None  # fixed seeds (reproduction); None draws secret ones
    distributions: tuple[str, ...] = DISTRIBUTIONS  # input distributions besides get_inputs()'s own
    libraries: tuple[str, ...] = ()  # libraries a candidate may call (enforced by the guards)
    baselines: str = "measured"  # measured now, cached, or skip
    compile_baseline: bool = True  # time torch.compile too (tests switch it off)
    compile_mode: str = "default"  # torch.compile's mode for that baseline (COMPILE_MODES)
    timing: TimingConfig = field(default_factory=TimingConfig)  # timing budget
    time_candidate: bool = True  # time at all (False: correctness only)
    build_timeout_s: float = 300.0  # hard limit on one build
    run_timeout_s: float = 120.0  # hard limit on one child command (import, one check, one timing round)
    allow_torch_compute: bool = False  # let the candidate compute with torch operators (the op audit then only reports)
    disabled_steps: frozenset[str] = frozenset()  # protocol steps switched off (ablation only)
    gpu_index: int = 0  # which GPU the children are pinned to
    preset: str | None = None  # the named settings this policy follows (kernelbench_preset), or None
    sanitize: bool = False  # run the candidate once under compute-sanitizer after the verdict (GPU; judge.sanitize)
    sanitize_timeout_s: float = 600.0  # per sanitizer tool
    sandbox: str = "auto"  # auto: what the machine allows; strict: refuse without the full sandbox; off (judge.sandbox)
    size: str = "auto"  # the problem's size: auto (cpu on the CPU backend where the problem declares one, else full), full or cpu (problems.sizes)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.n_seeds < 1:
            raise ValueError(f"n_seeds must be at least 1, got {self.n_seeds}")
        bad = [d for d in self.distributions if d not in DISTRIBUTIONS]
        if bad:
            raise ValueError(f"unknown distributions {bad}; known: {DISTRIBUTIONS}")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {COMPILE_MODES}, got {self.compile_mode!r}")
        if self.baselines not in BASELINE_MODES:
            raise ValueError(f"baselines must be one of {BASELINE_MODES}, got {self.baselines!r}")
        unknown = sorted(set(self.disabled_steps) - set(ALL_STEPS))
        if unknown:
            raise ValueError(f"unknown protocol steps {unknown}; known: {ALL_STEPS}")
        if self.build_timeout_s <= 0 or self.run_timeout_s <= 0:
            raise ValueError(f"timeouts must be positive, got {self.build_timeout_s}, {self.run_timeout_s}")
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; known: {PRESETS}")
        from kernelwright.judge.provenance import LIBRARIES

        odd = [name for name in self.libraries if name not in LIBRARIES]
        if odd:
            raise ValueError(f"unknown libraries {odd}; known: {LIBRARIES}")
        if self.sandbox not in ("auto", "strict", "off"):
            raise ValueError(f"sandbox must be auto, strict or off, got {self.sandbox!r}")
        if self.size not in ("auto", "full", "cpu"):
            raise ValueError(f"size must be auto, full or cpu, got {self.size!r}")
        if self.gpu_index < 0:
            raise ValueError(f"gpu_index must be >= 0, got {self.gpu_index}")

    def enabled(self, step: str) -> bool:
        """Whether a protocol step is on."""
        assert step in ALL_STEPS, step
        return step not in self.disabled_steps

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the verdict (seeds are never included: they are secret)."""
        d = dataclasses.asdict(self)
        d["seeds"] = "fixed" if self.seeds is not None else "secret"
        d["disabled_steps"] = sorted(self.disabled_steps)
        d["distributions"] = list(self.distributions)
        d["libraries"] = list(self.libraries)
        return d


# What a precision allowance loosens a float32 output's tolerance to (never tighter than the
# problem's own): a kernel may compute in that precision internally, and the reference stays
# strict fp32. 10-bit mantissas (tf32, fp16) round at about 5e-4 per element, bf16's 7-bit one at
# about 4e-3; the allowances leave room for sums over a few thousand terms. Calibrated on the
# H200 (docs/judge.md, benchmarks/precision_bench.py).
PRECISION_TOLERANCE = {
    "tf32": {"atol": 5e-3, "rtol": 5e-3},
    "fp16": {"atol": 5e-3, "rtol": 5e-3},
    "bf16": {"atol": 3e-2, "rtol": 3e-2},
}


def resolve_tolerance(dtype_name: str, problem_tolerance: dict[str, float] | None, atol: float | None, rtol: float | None,
                      precision: str = "fp32") -> tuple[float, float]:
    """(atol, rtol): the policy's override, else the problem's TOLERANCE, else the dtype default;
    for a float32 output under a precision allowance, no tighter than the allowance."""
    base = dict(DEFAULT_TOLERANCE.get(dtype_name, DEFAULT_TOLERANCE["float32"]))
    base.update(problem_tolerance or {})
    allow = PRECISION_TOLERANCE.get(precision) if dtype_name == "float32" else None
    if allow:
        base = {k: max(float(base[k]), allow[k]) for k in ("atol", "rtol")}
    return (atol if atol is not None else float(base["atol"]), rtol if rtol is not None else float(base["rtol"]))


PRESETS = ("kernelbench",)


def kernelbench_preset(**changes: Any) -> "Policy":
    """KernelBench's evaluation settings (from its published evaluator): atol = rtol = 1e-2, five
    correctness trials on get_inputs(), 100 timed calls after a short warm-up, no L2 flush. Only the
    settings change: every guard stays on, so a candidate that fools KernelBench's evaluator is
    still refused here. The verdict's policy says `preset: kernelbench`."""
    base: dict[str, Any] = dict(
        preset="kernelbench", atol=1e-2, rtol=1e-2, n_seeds=5, distributions=(),
        disabled_steps=frozenset({"extra_shapes", "l2_flush", "adaptive_stop"}),
        timing=TimingConfig(min_runs=100, max_runs=100, warmup_ms=0.0, budget_s=600.0),
    )
    base.update(changes)
    return Policy(**base)


def policy_to_wire(policy: Policy) -> dict[str, Any]:
    """The whole policy as JSON (fixed seeds included), for a judge in another process: the
    verdict's to_dict() hides seeds, this form keeps them so the far side judges the same."""
    d = dataclasses.asdict(policy)
    d["disabled_steps"] = sorted(policy.disabled_steps)
    return d


def policy_from_wire(data: dict[str, Any]) -> Policy:
    """The Policy that policy_to_wire wrote; ValueError naming what is malformed."""
    if not isinstance(data, dict):
        raise ValueError(f"a policy is a JSON object, got {type(data).__name__}")
    fields = {f.name for f in dataclasses.fields(Policy)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"unknown policy fields {unknown}")
    d = dict(data)
    if isinstance(d.get("timing"), dict):
        d["timing"] = TimingConfig(**d["timing"])
    for name in ("distributions", "libraries"):
        if name in d:
            d[name] = tuple(d[name])
    if d.get("seeds") is not None:
        d["seeds"] = tuple(int(s) for s in d["seeds"])
    if "disabled_steps" in d:
        d["disabled_steps"] = frozenset(d["disabled_steps"])
    try:
        return Policy(**d)
    except TypeError as exc:
        raise ValueError(f"malformed policy: {exc}") from None
