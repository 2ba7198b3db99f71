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

from kernelwright.judge.policy import OBJECTIVE_SETTINGS, Policy, policy_from_settings
from kernelwright.judge.settings import REPEAT

STRATEGIES = ("refine", "tree", "best-of-n")
LANGUAGES = ("cuda", "triton")  # what the candidates are written in: CUDA C++ (C++ on the CPU backend) or Triton


def _with_policy_settings(cls: type) -> type:
    """Give the class one field per judging rule an objective carries (judge.policy's
    OBJECTIVE_SETTINGS), named by its key, with the policy's type and default: a setting declared
    there is an objective setting, in files and flags alike, with no edit here."""
    annotations = cls.__dict__.get("__annotations__", {})
    for spec in OBJECTIVE_SETTINGS:
        assert spec.key not in annotations, f"{spec.key} is the policy's: declare it once, in judge.policy"
        annotations[spec.key] = spec.annotation
        setattr(cls, spec.key, spec.default)
    cls.__annotations__ = annotations
    return cls


@dataclass(frozen=True, kw_only=True)
@_with_policy_settings
class Objective:
    """What counts as success for a run, and how much it may spend. Besides these, one field per
    judging rule of the policy (precision, atol, rtol, libraries, seeds, timing_budget_s, size, ...):
    see judge.policy.OBJECTIVE_SETTINGS."""

    target_speedup: float | None = None  # stop once a candidate is this much faster than the faster of eager and torch.compile; None: spend the budgets
    strategy: str = "refine"  # refine, tree or best-of-n
    language: str = "cuda"  # cuda (CUDA C++; C++ on the CPU backend) or triton: the skill text and examples the model gets
    rounds: int = 5  # tree: idea rounds (refine and best-of-n: ignored)
    branches: int = 4  # tree: implementations per idea; best-of-n: samples
    ideas: int = 2  # tree: ideas asked for per round
    max_turns: int = 40  # refine: model requests in the trajectory; tree and best-of-n: requests per branch (1 + repairs)
    budget_tokens: int | None = None  # stop when prompt + completion tokens reach this
    budget_minutes: float | None = None  # stop after this many minutes of wall time
    stuck_after: int = 4  # pause when this many judged candidates in a row bring no gain over the best
    max_failures: int = 4  # pause when this many model turns in a row fail (no candidate, build or verdict failures)
    price_in_per_mtok: float | None = None  # USD per million prompt tokens, for cost accounting when the server reports none
    price_out_per_mtok: float | None = None  # USD per million completion tokens
    parallel_builds: int = 4  # candidates built at once on the CPU while the GPU judges
    sanitize_final: bool = True  # run the chosen candidate under compute-sanitizer in the final re-judge (GPU only)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.language not in LANGUAGES:
            raise ValueError(f"language must be one of {LANGUAGES}, got {self.language!r}")
        if self.target_speedup is not None and not self.target_speedup > 0:
            raise ValueError(f"target_speedup must be positive, got {self.target_speedup}")
        for name in ("rounds", "branches", "ideas", "max_turns", "stuck_after", "max_failures", "parallel_builds"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.budget_tokens is not None and self.budget_tokens < 1:
            raise ValueError(f"budget_tokens must be positive, got {self.budget_tokens}")
        if self.budget_minutes is not None and not self.budget_minutes > 0:
            raise ValueError(f"budget_minutes must be positive, got {self.budget_minutes}")
        for name in ("price_in_per_mtok", "price_out_per_mtok"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        for spec in OBJECTIVE_SETTINGS:  # the policy's checks, named as the objective names them
            if spec.kind == REPEAT and getattr(self, spec.key) is None:
                object.__setattr__(self, spec.key, ())
            why = spec.problem(getattr(self, spec.key))
            if why:
                raise ValueError(why)
            if spec.kind == REPEAT:  # a file's list
                object.__setattr__(self, spec.key, tuple(getattr(self, spec.key)))
        self.policy()  # the judge's own checks

    def settings(self) -> dict[str, Any]:
        """The judging rules, by key (what policy_from_settings reads)."""
        return {spec.key: getattr(self, spec.key) for spec in OBJECTIVE_SETTINGS}

    def policy(self, **changes: Any) -> Policy:
        """The judge's policy for this objective (changes override, by Policy field: e.g. time_candidate=False)."""
        return policy_from_settings(self.settings(), **changes)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """USD for that many tokens at the objective's prices, or None when no price is set."""
        if self.price_in_per_mtok is None and self.price_out_per_mtok is None:
            return None
        return (prompt_tokens * (self.price_in_per_mtok or 0.0) + completion_tokens * (self.price_out_per_mtok or 0.0)) / 1e6

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what from_dict reads back (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Objective":
        """Build from a dict; unknown keys are an error that names them."""
        known = {f.name for f in dataclasses.fields(Objective)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown objective settings {unknown}; known: {sorted(known)}")
        return Objective(**d)  # __post_init__ makes lists tuples


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
