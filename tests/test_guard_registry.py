"""The guards' registry (judge.guards): every guard names what proves it refuses a cheat and what
proves it accepts an honest candidate, each of which is a zoo entry the zoo test runs or a test
that exists; no guard is recorded in a verdict without being registered; docs/guards.md is the
registry's own page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kernelwright.judge import guards
from kernelwright.judge.guards.steps import ALL_STEPS, STEPS
from kernelwright.judge.verdicts import VerdictBuilder
from zoo import CONTROLS, EXPLOITS, STRUCTURAL, UNRECORDED

ROOT = Path(__file__).resolve().parents[1]
EXPLOIT = {e.name: e for e in EXPLOITS}
CONTROL = {c.name: c for c in CONTROLS}
SPECS = list(guards.registry().values())


def _test_exists(ref: str) -> bool:
    """`tests/FILE.py::NAME` names a test function defined in that file."""
    path, _, name = ref.partition("::")
    file = ROOT / path
    if not (name.startswith("test_") and file.is_file()):
        return False
    tree = ast.parse(file.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_proof_is_a_zoo_entry_refused_by_this_guard_or_an_existing_test(spec):
    assert spec.step in ALL_STEPS
    for proof in spec.proofs:
        if "::" in proof:
            assert _test_exists(proof), f"{spec.name}: no test {proof}"
            continue
        assert proof in EXPLOIT, f"{spec.name}: no zoo entry {proof}"
        e = EXPLOIT[proof]
        assert e.guard == spec.name or (e.off is not None and spec.step in e.off), (
            f"{spec.name}: zoo entry {proof} is refused by {e.guard}, and its ablation does not switch {spec.step} off")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_guard_accepts_an_honest_control_or_an_existing_test(spec):
    for ok in spec.accepts:
        assert (_test_exists(ok) if "::" in ok else ok in CONTROL), f"{spec.name}: no control or test {ok}"
    assert any("::" not in ok for ok in spec.accepts) or spec.refusal is None or spec.cuda_only, (
        f"{spec.name}: a refusing guard needs a zoo control it accepts")


def test_every_zoo_guard_is_registered_or_structural():
    for e in EXPLOITS:
        assert e.guard in guards.names() or e.guard in STRUCTURAL + UNRECORDED, f"{e.name}: guard {e.guard} is not registered"
    for name in guards.names():
        assert any(e.guard == name for e in EXPLOITS) or all("::" in p for p in guards.registry()[name].proofs), name


def test_every_guard_the_judge_records_is_registered():
    """A static read of the judge's sources: each literal name given to a guard record."""
    found = set()
    for path in (ROOT / "src" / "kernelwright" / "judge").rglob("*.py"):
        for m in re.finditer(r"\.guard\(\s*\"([a-z_0-9]+)\"", path.read_text()):
            found.add(m.group(1))
    assert found, "no guard records found: the pattern is stale"
    assert found <= guards.names(), found - guards.names()


def test_an_unregistered_guard_cannot_be_recorded():
    from kernelwright.judge.policy import Policy
    from kernelwright.problems.loader import Problem

    vb = VerdictBuilder(Problem.__new__(Problem), Policy(), "cpu")
    vb.guard("op_audit", False, "fine")
    with pytest.raises(RuntimeError, match="registry"):
        vb.guard("made_up", True, "")


def test_steps_are_unique_and_in_their_phase_order():
    names = [s.name for s in STEPS]
    assert len(set(names)) == len(names)
    phases = [s.phase for s in STEPS]
    assert phases == sorted(phases, key=("correctness", "timing").index)


def test_the_docs_page_is_the_registrys():
    page = (ROOT / "docs" / "guards.md").read_text()
    assert page == guards.markdown(), "docs/guards.md is stale: python -m kernelwright.judge.guards > docs/guards.md"

