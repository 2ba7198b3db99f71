"""What a guard and a protocol step declare about themselves (judge.guards collects them)."""

from __future__ import annotations

from dataclasses import dataclass

PHASES = ("import", "correctness", "timing", "profile", "pricing")  # in the order an evaluation reaches them
REFUSALS = ("rejected", "incorrect", None)  # None: the guard prices what it finds instead of refusing


@dataclass(frozen=True)
class StepSpec:
    """One protocol step of DESIGN.md: recorded in every verdict's `steps`, switchable for ablation."""

    name: str
    phase: str  # "correctness" or "timing"
    what: str  # what the step does, in a line

    def __post_init__(self) -> None:
        if self.phase not in ("correctness", "timing"):
            raise ValueError(f"step {self.name}: phase {self.phase!r}")


@dataclass(frozen=True)
class GuardSpec:
    """One guard: what it watches, when it runs, what it records, how it refuses, and what proves it.

    `proofs` name what it refuses: zoo entries (tests/zoo.py) or tests (`tests/FILE.py::NAME`);
    `accepts` name honest candidates it lets through: zoo controls or tests. Every guard has both
    (tests/test_guard_registry.py)."""

    name: str  # the name in the verdict's `guards`
    step: str  # the protocol step that switches it off (ablation)
    phases: tuple[str, ...]  # when it runs (PHASES)
    watches: str  # what it looks at
    finding: str  # what its record says when it holds
    refusal: str | None  # the verdict's status when it fires (REFUSALS)
    proofs: tuple[str, ...]
    accepts: tuple[str, ...]
    where: str = ""  # the module that decides, where that is not the guard's own module
    cuda_only: bool = False  # refuses only on the GPU (advisory or not applicable on the CPU backend)

    def __post_init__(self) -> None:
        bad = [p for p in self.phases if p not in PHASES]
        if bad or not self.phases:
            raise ValueError(f"guard {self.name}: phases {self.phases!r}")
        if self.refusal not in REFUSALS:
            raise ValueError(f"guard {self.name}: refusal {self.refusal!r}")
        if not self.proofs or not self.accepts:
            raise ValueError(f"guard {self.name}: needs at least one proof and one honest candidate it accepts")
