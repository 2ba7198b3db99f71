"""Statistics of timing samples and the stopping rule: pure Python, so the judge's own process
never needs torch for them."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Statistics of one contender's samples."""

    n: int  # samples
    median_ms: float  # median
    iqr_ms: float  # interquartile range
    rel_sem: float  # standard error of the median over the median (robust estimate)


def summarize(samples: list[float]) -> Summary:
    """Median, IQR and a robust relative standard error of the median."""
    n = len(samples)
    if n == 0:
        return Summary(0, math.nan, math.nan, math.inf)
    med = statistics.median(samples)
    if n < 4:
        return Summary(n, med, 0.0, math.inf)
    q = statistics.quantiles(samples, n=4)
    iqr = q[2] - q[0]
    sigma = iqr / 1.349  # normal-equivalent spread, robust to outliers
    sem = 1.2533 * sigma / math.sqrt(n)  # standard error of the median
    return Summary(n, med, iqr, sem / med if med > 0 else math.inf)


AMORTIZED_SLACK = 1.5  # a trimmed mean above this multiple of the median replaces it (candidate only)
AMORTIZED_TRIM = 0.05  # share of the slowest calls the trimmed mean leaves out (at least one call)


def amortized(samples: list[float]) -> tuple[float, float, bool]:
    """(median, trimmed mean, concentrated) of per-call times. The trimmed mean leaves out the
    slowest 5 % of calls (at least one), so a stall or two of an honest candidate does not move it;
    `concentrated` when it still exceeds AMORTIZED_SLACK x the median: the time sits in a minority
    of calls, and the median alone would report the cheap ones, as for a candidate that does the
    work of four calls in every fourth one (seen on the H200: median 0.026 ms, mean 0.84 ms)."""
    if not samples:
        return math.nan, math.nan, False
    med = statistics.median(samples)
    drop = max(1, math.ceil(AMORTIZED_TRIM * len(samples))) if len(samples) > 1 else 0
    kept = sorted(samples)[: len(samples) - drop]
    trimmed = statistics.fmean(kept)
    return med, trimmed, trimmed > AMORTIZED_SLACK * med


def should_stop(summaries: list[Summary], *, min_runs: int, max_runs: int, target: float, elapsed_s: float, budget_s: float, adaptive: bool) -> tuple[bool, str]:
    """The stopping rule: every contender precise enough, or a count or time limit reached."""
    fewest = min(s.n for s in summaries)
    if fewest < min_runs:
        if elapsed_s > budget_s:
            return True, f"time budget {budget_s:g} s spent before {min_runs} runs"
        return False, ""
    if max(s.n for s in summaries) >= max_runs:
        return True, f"reached max_runs={max_runs}"
    if not adaptive:
        return True, f"reached min_runs={min_runs} (adaptive stopping off)"
    if all(s.rel_sem <= target for s in summaries):
        return True, f"relative standard error <= {target:g} for every contender"
    if elapsed_s > budget_s:
        return True, f"time budget {budget_s:g} s spent"
    return False, ""
