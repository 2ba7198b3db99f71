"""The exploit zoo (tests/zoo.py): every exploit refused by its guard and judged as the ablation
says with that guard off; every honest control judged correct with no guard fired."""

from __future__ import annotations

import pytest

from conftest import needs_gpu
from kernelwright.judge.evaluate import evaluate
from kernelwright.judge.policy import ALL_STEPS
from kernelwright.problems.loader import load_problem
from zoo import CONTROLS, EXPLOITS, STRUCTURAL, fired, policy

ZOO_TIMEOUT_S = 300


def _marks(device: str) -> list:
    return [pytest.mark.gpu, needs_gpu()] if device == "cuda" else []


def _judge(problem_path, candidate_path, device: str, pol):
    return evaluate(problem_path, candidate_path, pol, device=device)


def test_the_zoo_is_as_large_as_promised():
    assert len(EXPLOITS) >= 30 and len(CONTROLS) >= 10
    assert len({e.name for e in EXPLOITS}) == len(EXPLOITS)
    for e in EXPLOITS:
        assert e.candidate_path.is_dir() and e.problem_path.is_file(), e.name
        assert e.guard in ALL_STEPS or e.guard in STRUCTURAL, e.guard
        assert (e.off is None) == (e.guard in STRUCTURAL), e.name
        assert e.off is None or e.off <= set(ALL_STEPS), e.off
    for c in CONTROLS:
        assert c.candidate_path.is_dir() and c.problem_path.is_file(), c.name


@pytest.mark.timeout(ZOO_TIMEOUT_S)
@pytest.mark.parametrize("e", [pytest.param(e, id=e.name, marks=_marks(e.device)) for e in EXPLOITS])
def test_exploit_is_refused_by_its_guard(e):
    on = _judge(e.problem_path, e.candidate_path, e.device, policy(e.device, allow_torch=e.allow_torch))
    if e.guard == "degeneracy_gate":
        from kernelwright.problems.check import check_problem

        assert on.status.value == "correct", on.log  # the judge alone cannot tell: the problem is at fault
        assert check_problem(load_problem(e.problem_path), device=e.device).degenerate
        return
    assert on.status.value in e.refused, (on.status, on.log)
    if e.guard in ALL_STEPS:
        assert e.guard in fired(on), (fired(on), on.log)
    if e.off is None and not e.off_policy:
        return
    off = _judge(e.problem_path, e.candidate_path, e.device,
                 policy(e.device, off=e.off or frozenset(), allow_torch=e.allow_torch, **e.off_policy))
    assert off.status.value == e.off_status, (off.status, off.log)
    if e.off_status == "correct":
        assert off.runtime_ms is not None and off.speedup_vs_eager is not None, off.log


@pytest.mark.timeout(ZOO_TIMEOUT_S)
@pytest.mark.parametrize("c", [pytest.param(c, id=c.name, marks=_marks(c.device)) for c in CONTROLS])
def test_honest_control_is_accepted(c):
    v = _judge(c.problem_path, c.candidate_path, c.device, policy(c.device))
    assert v.status.value == "correct", v.log
    assert not fired(v), (fired(v), v.log)
