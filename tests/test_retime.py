"""A timing window whose own instrument reads high is timed again in a fresh candidate child
(judge.phases.timing_phase): the trigger's arithmetic without a child, and the path on the CPU
backend with the trigger forced (on the CPU the device-wide tails it reads do not exist). A
candidate child taken for the second window is held to the audit and the timed re-checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import JUDGE_TIMEOUT_S, judge, needs_gpu, timing_policy
from kernelwright.judge import measure, phases
from kernelwright.judge.measure import Samples, TimingOutcome
from kernelwright.judge.policy import Policy

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


def _outcome(cand_ms: float, cand_tail_us: float, null_tail_us: dict[str, float], held_tail_us: dict[str, float] | None = None) -> TimingOutcome:
    s = Samples()
    s.times_ms.extend([cand_ms] * 12)
    s.synced_ms.extend([cand_ms + cand_tail_us / 1e3] * 12)
    held = {}
    for child, tail in (held_tail_us or {}).items():
        held[f"{child}:candidate"] = ([cand_ms] * 6, [cand_ms + tail / 1e3] * 6)
    return TimingOutcome(samples={"candidate": s}, stop_reason="", recheck_failure="", rechecked=0, compile_s=None,
                         null_ms={k: [0.001] * 6 for k in null_tail_us},
                         null_synced_ms={k: [0.001 + v / 1e3] * 6 for k, v in null_tail_us.items()}, held=held)


def _flow(device: str = "cuda", **meta) -> SimpleNamespace:
    return SimpleNamespace(device=device, policy=Policy(), meta=meta)


def test_own_excess_reads_the_empty_calls_of_a_short_contender():
    out = _outcome(0.05, 30.0, {"reference": 15.0, "candidate": 40.0})
    bases = out.tail_bases()
    assert bases["candidate"] == pytest.approx(0.020)  # capped: the reference child's 15 us plus 5
    assert out.own_excess(bases) == pytest.approx(0.020)


def test_own_excess_reads_the_held_calls_where_the_base_came_from_them():
    out = _outcome(0.27, 45.0, {"reference": 15.0, "candidate": 16.0}, {"candidate": 44.0, "reference": 20.0})
    bases = out.tail_bases(None, {"0.3": 0.030})
    assert "candidate" in out.held_used and bases["candidate"] == pytest.approx(0.025)
    assert out.own_excess(bases) == pytest.approx(0.019)


def test_a_window_reads_high_only_past_the_threshold_and_on_a_gpu():
    high = _outcome(0.27, 45.0, {"reference": 15.0, "candidate": 16.0}, {"candidate": 44.0, "reference": 20.0})
    level = _outcome(0.27, 30.0, {"reference": 15.0, "candidate": 16.0}, {"candidate": 28.0, "reference": 20.0})
    caps = dict(held_tail_before_ms={"0.3": 0.030})
    assert phases._reads_high(_flow(**caps), high) == pytest.approx(0.019)
    assert phases._reads_high(_flow(**caps), level) is None  # 3 us above the base: under RETIME_EXCESS_MS
    assert phases._reads_high(_flow("cpu", **caps), high) is None
    off = SimpleNamespace(device="cuda", policy=Policy(disabled_steps=frozenset({"device_sync"})), meta=caps)
    assert phases._reads_high(off, high) is None
    no_empty = _outcome(0.27, 45.0, {"reference": 15.0}, {"candidate": 44.0, "reference": 20.0})
    assert phases._reads_high(_flow(**caps), no_empty) is None  # the device_sync step prices device-wide times then


def test_the_threshold_is_the_documented_one():
    assert measure.RETIME_EXCESS_MS == 0.010 and measure.RETIMES == 1


@pytest.fixture
def forced(monkeypatch):
    """Every window reads 20 us high: the judge times again, once (measure.RETIMES)."""
    monkeypatch.setattr(phases, "_reads_high", lambda flow, outcome: 0.020)


def _judge_said(cand: str, policy=None) -> tuple[object, list[str]]:
    from conftest import candidate, problem
    from kernelwright.judge.evaluate import evaluate

    said: list[str] = []
    v = evaluate(problem("rowsum"), candidate(cand), policy or timing_policy(), device="cpu", progress=said.append)
    return v, said


def test_an_honest_candidate_timed_again_is_correct_and_says_so(forced):
    v, said = _judge_said("rowsum_correct")
    assert v.status.value == "correct", v.log
    assert v.workers["retimed"] == 1
    assert sum("timing again in a fresh candidate child" in m for m in said) == 1
    assert sum(m.startswith("importing the candidate") for m in said) == 2  # the second child imported it too
    assert v.runtime_ms and v.eager_ms


def test_a_verdict_not_timed_again_says_zero():
    v = judge("rowsum", "rowsum_correct", timing_policy())
    assert v.status.value == "correct" and v.workers["retimed"] == 0


def test_a_candidate_wrong_only_in_the_second_child_is_caught_by_the_timed_recheck(forced):
    v, _ = _judge_said("rowsum_wrong_when_retimed")
    assert v.status.value == "incorrect", v.log
    assert v.workers["retimed"] == 1  # said even when the second window ends the verdict
    assert any(g.name == "timed_recheck" and g.fired for g in v.guards)


def test_the_same_candidate_is_correct_when_no_window_is_timed_again():
    v = judge("rowsum", "rowsum_wrong_when_retimed", timing_policy())
    assert v.status.value == "correct", v.log


def test_a_candidate_that_computes_with_torch_only_in_the_second_child_is_refused_by_its_audit(forced):
    v, _ = _judge_said("rowsum_torch_when_retimed", timing_policy(allow_torch_compute=False))
    assert v.status.value == "rejected", v.log
    assert v.workers["retimed"] == 1
    assert any(g.name == "op_audit" and g.fired for g in v.guards)


def test_that_candidate_passes_the_audit_when_no_window_is_timed_again():
    v = judge("rowsum", "rowsum_torch_when_retimed", timing_policy(allow_torch_compute=False))
    assert v.status.value == "correct", v.log


def test_the_second_window_is_the_one_priced_and_the_first_child_is_gone_before_the_next(forced, monkeypatch, caplog):
    """A spy on the windows and on the children: the verdict's call count is the second window's,
    the first candidate child was closed before another was asked for, and the first window's
    per-call record is logged marked superseded."""
    import logging

    from kernelwright.judge import evaluate as ev

    windows, order = [], []
    real_window, real_child = phases._timed_window, ev._Flow._child

    def window(flow, ref, cand, baselines):
        out = real_window(flow, ref, cand, baselines)
        s = out.samples["candidate"]
        del s.times_ms[len(windows) + 3:]  # the two windows told apart by their call counts: 3, then 4
        windows.append((cand, len(s.times_ms)))
        return out

    def child(self, role, extra_env=None):
        if role == "candidate" and windows:  # asked for the second window's child
            order.append((windows[0][0]._closed, windows[0][0] in self.children))
        return real_child(self, role, extra_env)

    monkeypatch.setattr(phases, "_timed_window", window)
    monkeypatch.setattr(ev._Flow, "_child", child)
    caplog.set_level(logging.DEBUG, logger="kernelwright.judge.phases")
    v, _ = _judge_said("rowsum_correct")
    assert v.status.value == "correct", v.log
    assert [n for _, n in windows] == [3, 4] and v.timing.n == 4
    first_child = windows[0][0]
    assert first_child is not windows[1][0] and first_child._closed
    assert order == [(True, False)]  # closed, and out of the flow's children, before the next was asked for
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(phases.SAMPLES_PREFIX)]
    assert len(lines) == 2 and '"superseded": true' in lines[0] and "superseded" not in lines[1]


def test_a_spare_can_serve_the_second_window(forced, monkeypatch):
    from kernelwright.judge import spares

    monkeypatch.setenv("KERNELWRIGHT_SPARE_CHILDREN", "on")
    spares.POOL.close()
    try:
        judge("rowsum", "rowsum_correct", timing_policy())  # leaves a spare for the next evaluation
        assert spares.POOL.wait_idle()
        v, said = _judge_said("rowsum_correct")
        assert v.status.value == "correct", v.log
        assert v.workers["retimed"] == 1 and v.workers["candidate"] in ("spare", "new")
        assert any("spare candidate child" in m for m in said)  # the first window's child was the spare, released after
        assert sum(m.startswith("importing the candidate") for m in said) == 2
    finally:
        spares.POOL.wait_idle()
        spares.POOL.close()


def test_the_second_window_is_priced_no_lower_than_the_first_windows_stream_median():
    from kernelwright.judge.records import Timing
    from kernelwright.judge.verdicts import VerdictBuilder

    vb = VerdictBuilder(problem=SimpleNamespace(name="p", hash="h"), policy=Policy(), device="cuda")
    vb.numbers.update(phases._speedups(0.260, 0.300, None))
    vb.timing = Timing(n=24, median_ms=0.260, iqr_ms=0.001, wall_ms=None, profiler_ms=None, overhead_ms=0.002, raw_median_ms=0.262)
    vb.step("device_sync", True, "device-wide synchronize")
    flow = SimpleNamespace(vb=vb)
    phases._floor_from_first_window(flow, 0.270)
    assert vb.numbers["runtime_ms"] == pytest.approx(0.268) and vb.numbers["speedup_vs_eager"] == pytest.approx(0.300 / 0.268)
    assert "median stream time, 0.268 ms" in vb.steps["device_sync"].reason
    phases._floor_from_first_window(flow, 0.250)  # lower than the price: nothing moves
    assert vb.numbers["runtime_ms"] == pytest.approx(0.268)


@pytest.mark.gpu
@needs_gpu()
def test_gpu_a_window_timed_again_is_priced_from_the_second_child(forced):
    """On the GPU the whole path runs: the first candidate child closed, another taken (a spare
    when one is ready), the audit and the timing in it, step device_sync's record saying which
    window it priced; its time close to a verdict's with one window (the trigger forced)."""
    from conftest import candidate, problem
    from kernelwright.judge.evaluate import evaluate

    said: list[str] = []
    v = evaluate(problem("relu"), candidate("relu_cuda"), timing_policy(), device="cuda", progress=said.append)
    assert v.status.value == "correct", v.log
    assert v.workers["retimed"] == 1
    sync = next(s for s in v.steps if s.name == "device_sync")
    assert "the window timed in a fresh candidate child" in sync.reason and "20 us above its base" in sync.reason
    assert sum(m.startswith("importing the candidate") for m in said) == 2
