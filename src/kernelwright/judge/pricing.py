"""Turning measured times into the verdict's numbers: the lowest time a subtraction may leave, and
the speedups that follow from the three times."""

from __future__ import annotations

MIN_MS = 1e-6  # a time the harness overhead's subtraction cannot go below (the floor guard refuses it)


def speedups(runtime: float | None, eager: float | None, comp: float | None) -> dict[str, float | None]:
    """The verdict's times and the speedups that follow from them."""
    best = min([t for t in (eager, comp) if t is not None], default=None)
    return dict(runtime_ms=runtime, eager_ms=eager, compile_ms=comp,
                speedup_vs_eager=eager / runtime if eager and runtime else None,
                speedup_vs_compile=comp / runtime if comp and runtime else None,
                speedup_vs_best=best / runtime if best and runtime else None)
