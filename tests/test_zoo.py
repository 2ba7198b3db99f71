"""The exploit zoo (tests/zoo.py): every exploit refused by its guard and, with that guard off,
judged as the ablation says and showing the gain it is for (a speedup over eager where the trick
is about time, asserted on the GPU for the GPU entries; for `hidden`, the time with the guard
on against the time without); every honest control judged correct with
no guard fired."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import needs_gpu
from kernelwright.judge.policy import ALL_STEPS
from zoo import CONTROLS, EXPLOITS, GAINS, STRUCTURAL, _ablation_failures, control_failures, exploit_failures, judge_control, judge_exploit, uses_triton

ZOO_TIMEOUT_S = 300


def _marks(device: str, candidate_path) -> list:
    marks = [pytest.mark.gpu, needs_gpu()] if device == "cuda" else []
    if uses_triton(candidate_path) and importlib.util.find_spec("triton") is None:
        marks.append(pytest.mark.skip(reason="Triton is not installed: pip install -e '.[test]'"))
    return marks


def test_the_zoo_is_as_large_as_promised():
    assert len(EXPLOITS) >= 30 and len(CONTROLS) >= 10
    assert len({e.name for e in EXPLOITS}) == len(EXPLOITS)
    for e in EXPLOITS:
        assert e.candidate_path.is_dir() and e.problem_path.is_file(), e.name
        assert e.guard in ALL_STEPS or e.guard in STRUCTURAL, e.guard
        assert e.off is None or e.off <= set(ALL_STEPS), e.off
        assert e.off is not None or e.guard in STRUCTURAL, f"{e.name}: a step guard needs its ablation"
        assert e.off is not None or e.off_policy or e.evidence or e.hides_time or e.guard == "degeneracy_gate", f"{e.name}: a structural refusal needs its evidence"
        assert e.gain in GAINS, e.gain
        assert e.gain == "answer" or (e.off is not None and e.off_status == "correct"), f"{e.name}: a gain in time needs an ablation judged correct"
    for c in CONTROLS:
        assert c.candidate_path.is_dir() and c.problem_path.is_file(), c.name


@pytest.mark.timeout(ZOO_TIMEOUT_S)
@pytest.mark.parametrize("e", [pytest.param(e, id=e.name, marks=_marks(e.device, e.candidate_path)) for e in EXPLOITS])
def test_exploit_is_refused_by_its_guard(e):
    row = judge_exploit(e)
    assert not exploit_failures(e, row), (exploit_failures(e, row), row)


@pytest.mark.timeout(ZOO_TIMEOUT_S)
@pytest.mark.parametrize("c", [pytest.param(c, id=c.name, marks=_marks(c.device, c.candidate_path)) for c in CONTROLS])
def test_honest_control_is_accepted(c):
    row = judge_control(c)
    assert not control_failures(row), row


def test_the_time_gains_hold_the_ablation_to_what_each_promises():
    """Checked on the CPU on figures like the GPU's: `speed` wants faster than eager and than with
    every step on; `hidden` wants 10x under the price with every step on, on either side of eager."""
    side = next(e for e in EXPLOITS if e.name == "zoo_triton_side_stream")
    assert side.gain == "hidden"
    on = {"status": "correct", "speedup_vs_eager": 0.0026 / 14.1}  # priced with the hidden work
    row = lambda x: {"status": "correct", "speedup_vs_eager": x}  # noqa: E731
    assert _ablation_failures(side, on, row(88.0), "off") == [] and _ablation_failures(side, on, row(0.20), "off") == []
    assert _ablation_failures(side, on, row(5 * on["speedup_vs_eager"]), "off")  # only 5x under its price: nothing hidden
    assert _ablation_failures(side, on, {"status": "rejected", "speedup_vs_eager": None}, "off")
    speed = next(e for e in EXPLOITS if e.name == "relu_side_stream")
    assert _ablation_failures(speed, on, row(88.0), "off") == [] and _ablation_failures(speed, on, row(0.20), "off")
