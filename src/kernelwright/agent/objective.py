"""The engineer's objective for one optimisation run: goal, fairness rules, budgets, stuck rules.

Set from command-line flags or a run config file (JSON, or TOML on Python >= 3.11); flags given on
the command line win over the file. `policy()` turns it into the judge's Policy.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwright.judge.policy import BASELINE_MODES, COMPILE_MODES, PRECISIONS, Policy, TimingConfig

STRATEGIES = ("refine", "tree", "best-of-n")


@dataclass(frozen=True, kw_only=True)
class Objective:
    """What counts as success for a run, and how much it may spend."""

    target_speedup: float | None = None  # stop once a candidate is this much faster than the faster of eager and torch.compile; None: spend the budgets
    strategy: str = "refine"  # refine, tree or best-of-n
    rounds: int = 5  # tree: idea rounds (refine and best-of-n: ignored)
    branches: int = 4  # tree: implementations per idea; best-of-n: samples
    ideas: int = 2  # tree: ideas asked for per round
    max_turns: int = 40  # refine: model requests in the trajectory; tree and best-of-n: requests per branch (1 + repairs)
    budget_tokens: int | None = None  # stop when prompt + completion tokens reach this
    budget_minutes: float | None = None  # stop after this many minutes of wall time
    stuck_after: int = 4  # pause when this many judged candidates in a row bring no gain over the best
    max_failures: int = 4  # pause when this many model turns in a row fail (no candidate, build or verdict failures)
    precision: str = "fp32"  # the judge's precision mode
    atol: float | None = None  # tolerance override
    rtol: float | None = None  # tolerance override
    libraries: tuple[str, ...] = ()  # libraries a candidate may call
    allow_torch_compute: bool = False  # let candidates compute with torch operators
    compile_baseline: bool = True  # time torch.compile as a baseline (the target is against the faster of both)
    compile_mode: str = "default"  # torch.compile's mode for that baseline
    baselines: str = "measured"  # measured, cached or skip
    seeds: int = 3  # secret correctness seeds per verdict
    timing_budget_s: float | None = None  # the judge's timing budget per verdict (None: 20 s on a GPU, 5 s on a CPU)
    price_in_per_mtok: float | None = None  # USD per million prompt tokens, for cost accounting when the server reports none
    price_out_per_mtok: float | None = None  # USD per million completion tokens
    parallel_builds: int = 4  # candidates built at once on the CPU while the GPU judges
    sanitize_final: bool = True  # run the chosen candidate under compute-sanitizer in the final re-judge (GPU only)
    sanitize_timeout_s: float = 600.0  # per sanitizer tool in that re-judge
    size: str = "auto"  # the problem's size: auto (its CPU size on the CPU backend), full or cpu (problems.sizes)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.target_speedup is not None and not self.target_speedup > 0:
            raise ValueError(f"target_speedup must be positive, got {self.target_speedup}")
        for name in ("rounds", "branches", "ideas", "max_turns", "stuck_after", "max_failures", "seeds", "parallel_builds"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.budget_tokens is not None and self.budget_tokens < 1:
            raise ValueError(f"budget_tokens must be positive, got {self.budget_tokens}")
        if self.budget_minutes is not None and not self.budget_minutes > 0:
            raise ValueError(f"budget_minutes must be positive, got {self.budget_minutes}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {COMPILE_MODES}, got {self.compile_mode!r}")
        if self.baselines not in BASELINE_MODES:
            raise ValueError(f"baselines must be one of {BASELINE_MODES}, got {self.baselines!r}")
        if not self.sanitize_timeout_s > 0:
            raise ValueError(f"sanitize_timeout_s must be positive, got {self.sanitize_timeout_s}")
        for name in ("price_in_per_mtok", "price_out_per_mtok"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        object.__setattr__(self, "libraries", tuple(self.libraries))
        self.policy()  # the judge's own checks (tolerances, libraries, timing budget)

    def policy(self, **changes: Any) -> Policy:
        """The judge's policy for this objective (changes override, e.g. time_candidate=False)."""
        base: dict[str, Any] = dict(precision=self.precision, atol=self.atol, rtol=self.rtol, libraries=self.libraries,
                                    allow_torch_compute=self.allow_torch_compute, n_seeds=self.seeds,
                                    compile_baseline=self.compile_baseline and self.baselines != "skip",
                                    compile_mode=self.compile_mode, baselines=self.baselines,
                                    timing=TimingConfig(budget_s=self.timing_budget_s), size=self.size)
        base.update(changes)
        return Policy(**base)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """USD for that many tokens at the objective's prices, or None when no price is set."""
        if self.price_in_per_mtok is None and self.price_out_per_mtok is None:
            return None
        return (prompt_tokens * (self.price_in_per_mtok or 0.0) + completion_tokens * (self.price_out_per_mtok or 0.0)) / 1e6

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["libraries"] = list(self.libraries)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Objective":
        """Build from a dict; unknown keys are an error that names them."""
        known = {f.name for f in dataclasses.fields(Objective)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown objective settings {unknown}; known: {sorted(known)}")
        d = dict(d)
        if "libraries" in d:
            d["libraries"] = tuple(d["libraries"] or ())
        return Objective(**d)


def load_config(path: str | Path) -> dict[str, Any]:
    """A run config file's settings: JSON, or TOML (.toml). ValueError names the file on bad input."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read run config {p}: {exc.strerror or exc}") from None
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (ValueError, ImportError) as exc:
        raise ValueError(f"run config {p} is not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"run config {p} must hold a table of settings, got {type(data).__name__}")
    return dict(data.get("objective", data))


def merge(config: dict[str, Any], flags: dict[str, Any]) -> Objective:
    """The objective from a config file's settings overridden by the flags given (None = not given)."""
    settings = dict(config)
    settings.update({k: v for k, v in flags.items() if v is not None})
    return Objective.from_dict(settings)
