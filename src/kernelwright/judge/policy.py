"""Policy: what counts as correct and fair for one evaluation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from kernelwright.judge import settings
from kernelwright.judge.guards.steps import ALL_STEPS, CORRECTNESS_STEPS, TIMING_STEPS  # noqa: F401 (callers read them here)
from kernelwright.judge.provenance import LIBRARIES
from kernelwright.judge.settings import setting
from kernelwright.problems.sizes import HELP as SIZE_HELP, SIZES

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
    budget_s: float | None = setting(
        None, flag="--timing-budget-s", key="timing_budget_s", positive=True, old=("--budget-s",),
        help="time budget of the timing phase, in seconds (default 20 s on a GPU, 5 s on a CPU)")
    # consecutive timed calls per re-check round whose outputs are compared with the reference; two,
    # because work deferred to a later call leaves at least one of any two consecutive outputs unwritten
    recheck: int = 2
    lead_us: float = 200.0  # GPU spin before each start event, so host launch latency is not timed (0: off)

    def __post_init__(self) -> None:
        settings.check(self)
        if self.min_runs < 1 or self.max_runs < self.min_runs:
            raise ValueError(f"need 1 <= min_runs <= max_runs, got {self.min_runs}, {self.max_runs}")
        if self.batch < 1:
            raise ValueError(f"batch must be positive, got {self.batch}")
        if self.warmup_ms < 0:
            raise ValueError(f"warmup_ms must be >= 0, got {self.warmup_ms}")
        if not 0 < self.target_rel_sem < 1:
            raise ValueError(f"target_rel_sem must be in (0, 1), got {self.target_rel_sem}")
        if not 0 <= self.lead_us <= 10_000:
            raise ValueError(f"lead_us must be in [0, 10000], got {self.lead_us}")
        if self.recheck < 0:
            raise ValueError(f"recheck must be >= 0, got {self.recheck}")

    def budget_for(self, cuda: bool) -> float:
        """The timing phase's budget in seconds on this device."""
        return self.budget_s if self.budget_s is not None else DEFAULT_BUDGET_S["cuda" if cuda else "cpu"]


PRESETS = ("kernelbench",)
SANDBOXES = ("auto", "strict", "off")  # judge.sandbox


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What counts as correct and fair. Validated on construction; errors carry the values.

    A field declared with setting() is checked by it; one with a flag is a user's setting: its flag
    (kernelwright.flags), help and key in objectives (agent.objective) come from that declaration."""

    # strict fp32 unless asked; the baselines get the same allowance
    precision: str = setting(
        "fp32", flag="--precision", choices=PRECISIONS,
        help="numerics the candidate may use inside (default strict fp32): tolerances loosen to the allowance, references "
             "stay fp32, and the baselines are timed with the same allowance (TF32 on, or autocast)")
    atol: float | None = setting(None, flag="--atol", positive=True,
                                 help="absolute tolerance, overriding the problem's TOLERANCE and the dtype's default")
    rtol: float | None = setting(None, flag="--rtol", positive=True,
                                 help="relative tolerance, overriding the problem's TOLERANCE and the dtype's default")
    n_seeds: int = setting(3, flag="--seeds", key="seeds", minimum=1,
                           help="secret seeds for correctness (default 3; 5 with --preset kernelbench)")
    seeds: tuple[int, ...] | None = None  # fixed seeds (reproduction); None draws secret ones
    distributions: tuple[str, ...] = setting(DISTRIBUTIONS, choices=DISTRIBUTIONS)  # input distributions besides get_inputs()'s own
    # libraries a candidate may call (enforced by the guards)
    libraries: tuple[str, ...] = setting(
        (), flag="--allow-library", key="libraries", choices=LIBRARIES, metavar="NAME",
        help="let the candidate's GPU time include this library's kernels (repeatable; one of: " + ", ".join(LIBRARIES) + ")")
    baselines: str = setting("measured", flag="--baselines", choices=BASELINE_MODES,
                             help="measure eager/compile now (default), take them from the store (kernelwright baseline; "
                                  "measured where missing), or skip")
    compile_baseline: bool = setting(True, flag="--no-compile-baseline", old=("--no-compile",),
                                     help="do not time torch.compile (speedups are then against eager only)")
    compile_mode: str = setting("default", flag="--compile-mode", choices=COMPILE_MODES, old=("--mode",),
                                help="torch.compile mode of the compile baseline (default: default)")
    timing: TimingConfig = field(default_factory=TimingConfig)  # timing budget
    time_candidate: bool = setting(True, flag="--correctness-only", objective=False,  # the agent times what each step needs
                                   help="check correctness, do not time")
    build_timeout_s: float = setting(300.0, positive=True)  # hard limit on one build
    run_timeout_s: float = setting(120.0, positive=True)  # hard limit on one child command (import, one check, one timing round)
    # let the candidate compute with torch operators (the op audit then only reports)
    allow_torch_compute: bool = setting(False, flag="--allow-torch-compute",
                                        help="let the candidate compute with torch operators (refused by default)")
    disabled_steps: frozenset[str] = setting(frozenset(), choices=ALL_STEPS, noun="protocol steps")  # protocol steps switched off (ablation only)
    gpu_index: int = setting(0, minimum=0)  # which GPU the children are pinned to
    # the named settings this policy follows (kernelbench_preset), or None; objectives state their rules themselves
    preset: str | None = setting(
        None, flag="--preset", choices=PRESETS, objective=False,
        help="kernelbench: KernelBench's settings (atol=rtol=1e-2, 5 trials on get_inputs(), 100 timed calls, no L2 flush); "
             "every guard stays on")
    # run the candidate once under compute-sanitizer after the verdict (GPU; judge.sanitize); an
    # objective has its own rule for that (sanitize_final)
    sanitize: bool = setting(False, flag="--sanitize", objective=False,
                             help="after the verdict, run one forward under compute-sanitizer (memcheck, racecheck, initcheck) "
                                  "and record the findings (GPU)")
    sanitize_timeout_s: float = setting(600.0, flag="--sanitize-timeout-s", positive=True,
                                        help="compute-sanitizer's limit per tool, in seconds (default 600)")
    sandbox: str = setting(  # judge.sandbox
        "auto", flag="--sandbox", choices=SANDBOXES,
        help="the sandbox generated code runs in: auto (what this machine allows, and the verdict says what is missing), "
             "strict (refuse to run without the full sandbox), off (only the environment's allow-list)")
    size: str = setting("auto", flag="--size", choices=SIZES, help=SIZE_HELP)  # problems.sizes

    def __post_init__(self) -> None:
        settings.check(self)

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


PRESET_POLICIES = {"kernelbench": kernelbench_preset}  # preset name -> its policy

SETTINGS = tuple(settings.specs(Policy))  # every declared setting, the timing config's included ("timing.budget_s")
USER_SETTINGS = tuple(s for s in SETTINGS if s.setting.flag)  # those users set: one flag each
OBJECTIVE_SETTINGS = tuple(s for s in USER_SETTINGS if s.setting.objective)  # those an engineer's objective carries


def policy_from_settings(values: Mapping[str, Any], **changes: Any) -> Policy:
    """The policy for users' settings by key (a setting left out keeps the default, or its preset's
    value); baselines = skip skips the compile baseline too; then changes (by Policy field) apply.
    ValueError names an unknown key or a refused value."""
    unknown = sorted(set(values) - {s.key for s in USER_SETTINGS})
    if unknown:
        raise ValueError(f"unknown policy settings {unknown}; known: {sorted(s.key for s in USER_SETTINGS)}")
    preset = values.get("preset")
    policy = PRESET_POLICIES[preset]() if preset in PRESET_POLICIES else Policy()
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for spec in USER_SETTINGS:
        if spec.key in values:
            value = tuple(values[spec.key] or ()) if spec.kind == settings.REPEAT else values[spec.key]
            head, _, rest = spec.path.partition(".")
            if rest:
                nested.setdefault(head, {})[rest] = value
            else:
                top[head] = value
    top.update({head: dataclasses.replace(getattr(policy, head), **sub) for head, sub in nested.items()})
    policy = dataclasses.replace(policy, **top)
    if policy.baselines == "skip":
        policy = dataclasses.replace(policy, compile_baseline=False)
    return dataclasses.replace(policy, **changes) if changes else policy


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
