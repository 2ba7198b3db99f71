"""Bench metrics: pass rate, faster-than rates, fast_p and geometric-mean speedups with bootstrap
intervals, per level and overall.

Every denominator is every problem of the suite: a missing solution, a wrong kernel and a failure of
the judge itself all count against the rates (`infra_error` is counted apart as well, so a reviewer
sees it). Speedups are baseline time over candidate time, from the verdict's medians:
- `over_1x`: t < t0; `over_5pct`: t < 0.95 * t0 (the milestone reward's margin);
- `best` is the faster of eager and torch.compile that were timed (the verdict's `speedup_vs_best`;
  `n_missing_baseline` counts the correct results that lack a baseline); `both` needs each of them;
- fast_p (KernelBench's metric): the share of problems that are correct with a speedup above p; a
  correct result without that baseline's time counts only at p = 0, so fast_0 is the pass rate;
- the geometric mean over the correct ones uses those with the baseline's time; over all problems, a
  problem without a correct, timed result counts as 1x.
Intervals resample the problems with replacement (percentile bootstrap), from a fixed seed per series,
so the same verdicts give the same intervals; fewer than MIN_CI_N values get no interval. A
correct verdict with compute-sanitizer errors (where the policy ran it) counts as a failure.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import numpy as np

P_VALUES = (0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0)  # the fast_p thresholds
MARGIN = 0.95  # "more than 5 % faster": t < MARGIN * t0
BASELINES = ("eager", "compile", "best")  # speedup series; best = the faster of those timed
MISSING = "missing"  # row status: no solution found
INVALID = "invalid_candidate"  # row status: a solution the judge could not take (malformed, too large)
PROBLEM_ERROR = "problem_error"  # row status: the reference problem itself failed to load
MIN_CI_N = 5  # fewer values than this get no interval (a bootstrap of 1-4 values says nothing)


@dataclass(frozen=True, kw_only=True)
class Bootstrap:
    """How intervals are drawn."""

    resamples: int = 10_000  # bootstrap resamples per interval
    seed: int = 0  # base seed; each series mixes in its own name
    confidence: float = 0.95  # two-sided coverage

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"seed must be non-negative, got {self.seed}")
        if self.resamples < 1:
            raise ValueError(f"resamples must be at least 1, got {self.resamples}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must lie in (0, 1), got {self.confidence}")

    def to_dict(self) -> dict[str, Any]:
        return {"resamples": self.resamples, "seed": self.seed, "confidence": self.confidence}


@dataclass(frozen=True)
class Outcome:
    """One problem's result, as the metrics see it."""

    name: str  # problem name
    level: Optional[int]  # suite level, None for a plain path
    status: str  # the verdict's status, or "missing"
    runtime_ms: Optional[float] = None  # candidate median
    eager_ms: Optional[float] = None  # eager median
    compile_ms: Optional[float] = None  # torch.compile median
    sanitizer_errors: Optional[int] = None  # compute-sanitizer's error count when it ran

    @property
    def correct(self) -> bool:
        """A correct verdict, and no compute-sanitizer error where the sanitizer ran."""
        return self.status == "correct" and not self.sanitizer_errors

    def baseline_ms(self, against: str) -> Optional[float]:
        """The baseline's time; `best` is the faster of those timed."""
        if against == "eager":
            return _positive(self.eager_ms)
        if against == "compile":
            return _positive(self.compile_ms)
        if against == "best":
            times = [t for t in (_positive(self.eager_ms), _positive(self.compile_ms)) if t is not None]
            return min(times) if times else None
        raise ValueError(f"unknown baseline {against!r}; expected one of {', '.join(BASELINES)}")

    def speedup(self, against: str) -> Optional[float]:
        """Baseline time over candidate time for a correct, timed result; None otherwise."""
        t, t0 = _positive(self.runtime_ms), self.baseline_ms(against)
        if not self.correct or t is None or t0 is None:
            return None
        return t0 / t

    def faster(self, against: str, margin: float = 1.0) -> bool:
        """Correct and t < margin * t0; `both` needs it against eager and against torch.compile."""
        if against == "both":
            return self.faster("eager", margin) and self.faster("compile", margin)
        t, t0 = _positive(self.runtime_ms), self.baseline_ms(against)
        return self.correct and t is not None and t0 is not None and t < margin * t0


def _positive(value: Optional[float]) -> Optional[float]:
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def outcome_of(row: dict[str, Any]) -> Outcome:
    """An Outcome from a bench problem row (name, level, status, verdict)."""
    v = row.get("verdict") or {}
    return Outcome(name=row["name"], level=row.get("level"), status=row.get("status") or v.get("status") or MISSING,
                   runtime_ms=v.get("runtime_ms"), eager_ms=v.get("eager_ms"), compile_ms=v.get("compile_ms"),
                   sanitizer_errors=(v.get("sanitizer") or {}).get("errors"))


def geomean(values: Sequence[float]) -> Optional[float]:
    """exp(mean(log x)); None for an empty list."""
    if not values:
        return None
    return float(math.exp(sum(math.log(x) for x in values) / len(values)))


def bootstrap_geomean(values: Sequence[float], boot: Bootstrap, key: str) -> Optional[list[float]]:
    """Percentile interval of the geometric mean over resampled values; None under MIN_CI_N values."""
    if len(values) < MIN_CI_N:
        return None
    logs = np.log(np.asarray(values, dtype=np.float64))
    rng = np.random.default_rng([boot.seed, zlib.crc32(key.encode())])
    idx = rng.integers(0, len(logs), size=(boot.resamples, len(logs)))
    means = np.exp(logs[idx].mean(axis=1))
    tail = (1.0 - boot.confidence) / 2.0 * 100.0
    lo, hi = np.percentile(means, [tail, 100.0 - tail])
    return [float(lo), float(hi)]


def _rate(count: int, n: int) -> Optional[float]:
    return count / n if n else None


def _p_key(p: float) -> str:
    return f"{p:g}"


def fast_p(outcomes: Sequence[Outcome], against: str, p: float) -> Optional[float]:
    """Share of problems correct with speedup > p (at p = 0 every correct one counts)."""
    if p == 0:
        return _rate(sum(o.correct for o in outcomes), len(outcomes))
    return _rate(sum((s := o.speedup(against)) is not None and s > p for o in outcomes), len(outcomes))


def _geomean_block(outcomes: Sequence[Outcome], against: str, boot: Bootstrap, group: str, measured: bool = True) -> dict[str, Any]:
    timed = [s for o in outcomes if (s := o.speedup(against)) is not None]
    everyone = [s if (s := o.speedup(against)) is not None else 1.0 for o in outcomes] if measured else []
    out = {}
    for kind, values in (("correct", timed), ("all", everyone)):
        out[kind] = {"value": geomean(values), "ci95": bootstrap_geomean(values, boot, f"{group}/{against}/{kind}"), "n": len(values)}
    return out


def _faster_block(outcomes: Sequence[Outcome], against: str, timed: bool) -> dict[str, Optional[float]]:
    n = len(outcomes) if timed else 0  # a baseline never timed gives no rate, not 0 %
    return {"over_1x": _rate(sum(o.faster(against) for o in outcomes), n), "over_5pct": _rate(sum(o.faster(against, MARGIN) for o in outcomes), n)}


def group_metrics(outcomes: Sequence[Outcome], boot: Bootstrap, group: str = "overall") -> dict[str, Any]:
    """Every metric of one group of problems (a level, or all of them). A baseline that no problem of
    the group has a time for (its policy skipped it) gives None, not 0 %, for its series."""
    n = len(outcomes)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    correct = [o for o in outcomes if o.correct]
    timed = {b: any(o.baseline_ms(b) is not None for o in outcomes) for b in BASELINES}
    timed["both"] = timed["eager"] and timed["compile"]
    return {
        "n_problems": n, "n_judged": n - sum(counts.get(k, 0) for k in (MISSING, INVALID, PROBLEM_ERROR)), "n_missing": counts.get(MISSING, 0),
        "n_correct": len(correct), "n_infra_error": counts.get("infra_error", 0),
        "n_sanitizer_errors": sum(bool(o.sanitizer_errors) for o in outcomes), "status_counts": dict(sorted(counts.items())),
        "pass_rate": _rate(len(correct), n),
        "faster_than": {b: _faster_block(outcomes, b, timed[b]) for b in ("eager", "compile", "both")},
        "fast_p": {b: {_p_key(p): fast_p(outcomes, b, p) if timed[b] else None for p in P_VALUES} for b in BASELINES},
        "geomean_speedup": {b: _geomean_block(outcomes, b, boot, group, timed[b]) for b in BASELINES},
        "n_missing_baseline": {b: sum(o.baseline_ms(b) is None for o in correct) for b in ("eager", "compile")},
    }


def bench_metrics(outcomes: Iterable[Outcome], boot: Bootstrap = Bootstrap()) -> dict[str, Any]:
    """{"overall": ..., "levels": {"1": ..., ...}}; problems without a level appear only overall."""
    items = list(outcomes)
    levels = sorted({o.level for o in items if o.level is not None})
    return {"overall": group_metrics(items, boot, "overall"),
            "levels": {str(lv): group_metrics([o for o in items if o.level == lv], boot, f"level{lv}") for lv in levels}}
