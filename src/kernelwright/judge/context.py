"""The evaluation context: what the phases (judge.phases, judge.phases_timing, judge.phases_pricing)
and the guards (judge.guards) read and write of one evaluation. judge.evaluate.Flow is the one
implementation; this module names the interface so that the phases depend on it, not on the flow
that drives them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol

from kernelwright.judge.policy import Policy
from kernelwright.judge.verdicts import VerdictBuilder
from kernelwright.judge.workers import Child, ChildError


class Context(Protocol):
    """One evaluation's state as the phases see it."""

    problem: Any  # the loaded problem (problems.loader.Problem)
    candidate_path: str | Path  # the candidate as given
    policy: Policy
    device: str  # "cuda" or "cpu"
    vb: VerdictBuilder  # the verdict being built: steps, guards, numbers
    workdir: Path  # the evaluation's private folder
    say: Callable[[str], None]  # progress, one line
    seeds: list[int]  # the correctness cases' secret seeds
    meta: dict[str, Any]  # the reference child's setup reply
    cand_meta: dict[str, Any]  # the candidate child's setup reply
    files: Any  # what discovery found (judge.candidate.CandidateFiles), or None
    baseline_store: str | Path | None  # where cached baselines are looked up (None: the default store)
    cache_note: str  # why cached baselines were measured after all (step interleave)
    oracle_note: str  # why step precision has no oracle, when it has none
    precision: list[dict[str, Any]] | None  # step precision's figures from the oracle's case comparison
    retimed: list[float]  # per timing window not priced: how far step device_sync's charge moved its price

    def lead_us(self) -> tuple[float, str]:
        """The policy's lead spin in microseconds (0: off) and the note step cuda_events gives it."""
        ...

    def child_stop(self, exc: ChildError, where: str) -> Exception:
        """The verdict's stop for a child's failure `where` (a case, the timing, ...), to raise."""
        ...

    def fresh_candidate(self, old: Child) -> Child:
        """Another candidate child for a timing window timed again; the old one is closed."""
        ...
