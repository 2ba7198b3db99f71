"""The judge's guards and protocol steps in one registry.

Each guard is a module of this package with a `SPEC` (judge.guards.spec.GuardSpec): what it watches,
when it runs, what it records, how it refuses, and the zoo entries or tests that prove it refuses
a cheat and accepts an honest candidate. Guards whose decision needs nothing of the children's
keep it beside their SPEC (`apply`); the others name the module that decides (`where`). The
verdict's `guards` may hold only names registered here (judge.verdicts), its `steps` come from
judge.guards.steps, and docs/guards.md is generated from this registry
(`python -m kernelwright.judge.guards > docs/guards.md`; tests/test_guard_registry.py keeps it so).

The registry is read lazily: the guards' modules import the judge's timing and verdict modules,
which import the step list from here."""

from __future__ import annotations

import functools
import importlib

from kernelwright.judge.guards.spec import PHASES, GuardSpec

GUARD_MODULES = ("seeds", "near_duplicate", "distributions", "extra_shapes", "output_checks", "inputs_unchanged", "numerics_flags",
                 "function_identities", "op_audit", "precision", "timed_recheck", "between_calls", "device_sync", "amortized_time", "wall_clock",
                 "kernel_provenance", "physics_floor")


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, GuardSpec]:
    """Every guard by its verdict name, in the order an evaluation reaches them."""
    specs = [importlib.import_module(f"{__name__}.{m}").SPEC for m in GUARD_MODULES]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise RuntimeError(f"two guards share a name: {names}")
    return {s.name: s for s in sorted(specs, key=lambda s: (PHASES.index(s.phases[0]), GUARD_MODULES.index(_module(s, specs))))}


def _module(spec: GuardSpec, specs: list[GuardSpec]) -> str:
    return GUARD_MODULES[specs.index(spec)]


def names() -> frozenset[str]:
    return frozenset(registry())


def markdown() -> str:
    """docs/guards.md: the registry as a page."""
    from kernelwright.judge.guards.steps import STEPS

    out = ["# Guards and protocol steps", "",
           "Generated from the registry in `src/kernelwright/judge/guards/` by",
           "`python -m kernelwright.judge.guards > docs/guards.md`; a test fails when this page and the registry differ.", "",
           "A **step** is a part of the protocol that every verdict's `steps` lists, with whether it ran and why not;",
           "each can be switched off for an ablation. A **guard** is what refuses or reprices a candidate; every verdict's",
           "`guards` lists the ones that ran, with `fired` and a detail. Each guard names the exploits it refuses (entries of",
           "the zoo, `tests/zoo.py`, or tests) and the honest candidates it accepts; a test runs both.", "",
           "## Guards", "",
           "| guard | step | when | watches | refusal | refuses (proof) | accepts |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in registry().values():
        refusal = s.refusal or "none: it prices what it finds"
        if s.cuda_only:
            refusal += " (GPU; advisory or not applicable on the CPU backend)"
        out.append(f"| `{s.name}` | `{s.step}` | {', '.join(s.phases)} | {s.watches} | {refusal} | "
                   f"{', '.join(f'`{p}`' for p in s.proofs)} | {', '.join(f'`{a}`' for a in s.accepts)} |")
    out += ["", "## Steps", "", "| step | phase | what |", "| --- | --- | --- |"]
    out += [f"| `{s.name}` | {s.phase} | {s.what} |" for s in STEPS]
    return "\n".join(out) + "\n"
