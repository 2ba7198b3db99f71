"""Turning measured times into the verdict's numbers: the lowest time a subtraction may leave, and
the speedups that follow from the three times."""

from __future__ import annotations

import statistics

# 1: step device_sync charged every contender's late device-wide ends, the baselines' too; 2 (issue 27):
# only the candidate's. A baseline is the judge's own torch code on the stream that is timed, so a
# late device-wide end there is the host waking late, never work hidden elsewhere; charging it put
# torch.compile's price up to 2.8 % above triton's do_bench (benchmarks/results/dobench.md, run 1)
# and flattered a candidate's speedup against it. Cached baselines are keyed by this version.
VERSION = 2
MIN_MS = 1e-6  # a time the harness overhead's subtraction cannot go below (the floor guard refuses it)


def speedups(runtime: float | None, eager: float | None, comp: float | None) -> dict[str, float | None]:
    """The verdict's times and the speedups that follow from them."""
    best = min([t for t in (eager, comp) if t is not None], default=None)
    return dict(runtime_ms=runtime, eager_ms=eager, compile_ms=comp,
                speedup_vs_eager=eager / runtime if eager and runtime else None,
                speedup_vs_compile=comp / runtime if comp and runtime else None,
                speedup_vs_best=best / runtime if best and runtime else None)


def charged_times(contender: str, charged: list[float], stream: list[float]) -> list[float]:
    """The per-call times a contender is priced from under step device_sync: the candidate's as
    charged, a baseline's as its stream timed them (VERSION)."""
    return list(charged) if contender == "candidate" else list(stream)


def median_price(times: list[float], overhead: float) -> float:
    """A contender's price from its per-call times: their median less the harness overhead. Every
    baseline is priced so, in a verdict and in the baseline cache alike (never at a trimmed mean: a
    stall during its calls, or one a candidate causes, would inflate the candidate's speedup); so is
    the candidate, unless step amortized_time prices it at its trimmed mean."""
    return max(MIN_MS, statistics.median(times) - overhead)
