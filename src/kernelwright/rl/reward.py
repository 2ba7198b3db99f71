"""An episode's reward from its final verdict, and the per-turn shaping a config may add.

The default is the milestone reward CUDA Agent trains with: -1 when the final
candidate is not correct (a refused exploit, a wrong answer, a build that failed, no candidate at
all), 1 when it is correct, 2 when it is also more than 5 % faster than eager PyTorch, 3 when it is
more than 5 % faster than both eager and torch.compile. "More than 5 % faster" is t < 0.95 t0, on
the times the verdict priced (runtime_ms against eager_ms and compile_ms), never on a rounded
speedup. A verdict whose status is `infra_error` is the judge's failure, not the policy's: the
episode is marked excluded and gets no reward at all, never -1.

`log_speedup` is the named alternative: log(t_best / t) clipped to [lo, hi], where t_best is the
faster baseline the verdict timed, and `lo` for anything not correct.

Shaping (off by default) pays a small bonus for the first passing `verify` and the first correct
`profile` of each distinct candidate (by content hash: calling the same tool again on the same
files pays nothing, an edit as small as a comment makes a new candidate), capped per episode, and
paid only when the final candidate is correct.

A final verdict is `correct` with compute-sanitizer's findings beside it (the judge treats them as
advisory); the reward does not: a correct candidate with sanitizer errors is paid -1. The report
comes from a run of candidate code, so a candidate could forge one, but only against itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

KINDS = ("milestone", "log_speedup")
MARGIN = 0.95  # "more than 5 % faster": t < MARGIN * t0


@dataclass(frozen=True)
class Reward:
    """The reward of one episode and why."""

    value: float | None  # None when the episode is excluded (infra_error)
    kind: str  # milestone or log_speedup
    reason: str  # one sentence, with the times it compared
    milestone: int | None = None  # -1, 1, 2 or 3 (None when excluded); kept under log_speedup too
    excluded: bool = False  # True for infra_error: leave the episode out of the reward and the loss
    shaping: float = 0.0  # the per-turn bonuses included in value

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "kind": self.kind, "reason": self.reason, "milestone": self.milestone,
                "excluded": self.excluded, "shaping": self.shaping}


@dataclass(frozen=True)
class RewardConfig:
    """Which reward an environment pays."""

    kind: str = "milestone"
    clip: tuple[float, float] = (-1.0, 3.0)  # log_speedup's bounds; lo is also its value for a candidate not correct
    verify_bonus: float = 0.0  # shaping: the first passing verify of each distinct candidate
    profile_bonus: float = 0.0  # shaping: the first correct profile of each distinct candidate
    shaping_cap: float = 0.5  # at most this much shaping per episode

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"reward kind must be one of {KINDS}, got {self.kind!r}")
        lo, hi = self.clip
        if not lo < hi:
            raise ValueError(f"reward clip must be (lo, hi) with lo < hi, got {self.clip}")
        for name in ("verify_bonus", "profile_bonus", "shaping_cap"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "RewardConfig":
        known = {"kind", "clip", "verify_bonus", "profile_bonus", "shaping_cap"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown reward settings {unknown}; known: {sorted(known)}")
        d = dict(d)
        if "clip" in d:
            d["clip"] = tuple(float(x) for x in d["clip"])
        return RewardConfig(**d)


def _time(verdict: dict[str, Any], key: str) -> float | None:
    value = verdict.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def milestone(verdict: dict[str, Any] | None) -> Reward:
    """CUDA Agent's milestone reward for a final verdict (its JSON form); None: no candidate."""
    if verdict is None:
        return Reward(-1.0, "milestone", "no candidate was judged: the episode ended without model_new.py", milestone=-1)
    status = str(verdict.get("status"))
    if status == "infra_error":
        return Reward(None, "milestone", "the judge failed (infra_error): excluded from the reward and the loss", excluded=True)
    if status != "correct":
        return Reward(-1.0, "milestone", f"the final verdict is {status}, not correct", milestone=-1)
    found = (verdict.get("sanitizer") or {}).get("errors") if isinstance(verdict.get("sanitizer"), dict) else None
    if isinstance(found, int) and not isinstance(found, bool) and found > 0:  # a report the candidate could forge only against itself
        return Reward(-1.0, "milestone", f"correct, but compute-sanitizer found {found} error(s) in it", milestone=-1)
    t, eager, comp = _time(verdict, "runtime_ms"), _time(verdict, "eager_ms"), _time(verdict, "compile_ms")
    if t is None or eager is None:
        return Reward(1.0, "milestone", "correct, but the verdict has no candidate or eager time to compare", milestone=1)
    if not t < MARGIN * eager:
        return Reward(1.0, "milestone", f"correct; {t:.4g} ms is not more than 5 % faster than eager's {eager:.4g} ms", milestone=1)
    if comp is None:
        return Reward(2.0, "milestone", f"correct and {t:.4g} ms < 0.95 x eager's {eager:.4g} ms; no torch.compile time, so 3 is out of reach",
                      milestone=2)
    if not t < MARGIN * comp:
        return Reward(2.0, "milestone", f"correct and {t:.4g} ms < 0.95 x eager's {eager:.4g} ms, but not 0.95 x torch.compile's {comp:.4g} ms",
                      milestone=2)
    return Reward(3.0, "milestone", f"correct and {t:.4g} ms < 0.95 x both eager's {eager:.4g} ms and torch.compile's {comp:.4g} ms",
                  milestone=3)


def score(verdict: dict[str, Any] | None, config: RewardConfig | None = None, *, shaping: float = 0.0) -> Reward:
    """The configured reward for a final verdict, the episode's shaping (already capped) added."""
    config = config or RewardConfig()
    base = milestone(verdict)
    if base.excluded:
        return base
    if config.kind == "milestone":
        value, reason = float(base.value or 0.0), base.reason
    else:
        lo, hi = config.clip
        t = _time(verdict or {}, "runtime_ms")
        best = [x for x in (_time(verdict or {}, "eager_ms"), _time(verdict or {}, "compile_ms")) if x is not None]
        if base.milestone == -1 or t is None or not best:
            value, reason = lo, f"{base.reason}; log speedup at its floor {lo:g}"
        else:
            raw = math.log(min(best) / t)
            value = min(hi, max(lo, raw))
            reason = f"log({min(best):.4g} / {t:.4g}) = {raw:.3f}, clipped to [{lo:g}, {hi:g}]"
    if shaping and (base.milestone or 0) < 1:  # bonuses on the way to a final candidate that is not correct: none
        reason += f"; shaping of {shaping:g} withheld: the final candidate is not correct"
        shaping = 0.0
    elif shaping:
        reason += f"; shaping +{shaping:g}"
    return Reward(value + shaping, config.kind, reason, milestone=base.milestone, shaping=shaping)


@dataclass
class Shaping:
    """Per-turn bonuses of one episode: each distinct candidate pays once per tool, capped."""

    config: RewardConfig
    paid: set[tuple[str, str]] = field(default_factory=set)  # (tool, candidate hash)
    total: float = 0.0

    def turn(self, tool: str, verdict: dict[str, Any] | None, candidate_hash: str | None) -> float:
        """The bonus this tool call earns (0 for most); added to the episode's total."""
        bonus = {"verify": self.config.verify_bonus, "profile": self.config.profile_bonus}.get(tool, 0.0)
        if not bonus or not verdict or verdict.get("status") != "correct" or not candidate_hash:
            return 0.0
        key = (tool, candidate_hash)
        if key in self.paid:
            return 0.0
        self.paid.add(key)
        earned = max(0.0, min(bonus, self.config.shaping_cap - self.total))
        self.total += earned
        return earned
