"""A timing window whose price step device_sync's charge moved by more than 1 % is timed again in
a fresh candidate child (judge.phases_timing.timing_phase): the trigger's arithmetic without a child, and
the path on the CPU backend with the trigger forced (on the CPU there is no charge to read). A
candidate child taken for the second window is held to the audit and the timed re-checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import JUDGE_TIMEOUT_S, judge, needs_gpu, timing_policy
from kernelwright.judge import measure, phases_pricing, phases_timing, pricing
from kernelwright.judge.samples import Samples, TimingOutcome
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


def test_a_window_is_timed_again_when_the_charge_moves_its_median_by_more_than_one_percent():
    caps = dict(held_tail_before_ms={"0.3": 0.030})
    # calls 45 us late against a base of 16 us and a 10 us margin: each charged 19 us, 7 % of 0.27 ms
    late = _outcome(0.27, 45.0, {"reference": 15.0, "candidate": 16.0})
    assert phases_timing._charge_share(_flow(**caps), late) == pytest.approx(0.019 / 0.269)  # of the price: less the 1 us harness overhead
    # 28 us: 2 us charged, 0.7 %: priced as it is
    assert phases_timing._charge_share(_flow(**caps), _outcome(0.27, 28.0, {"reference": 15.0, "candidate": 16.0})) is None
    # the candidate child's own calls of the judge's kernel level with the base, its calls charged (softmax/v9 at f8dca61)
    level_instrument = _outcome(0.27, 37.6, {"reference": 15.0, "candidate": 16.0}, {"candidate": 16.5, "reference": 23.0})
    assert phases_timing._charge_share(_flow(**caps), level_instrument) == pytest.approx((37.6 - 16.5 - 10.0) / 1e3 / 0.269)


def test_no_window_is_timed_again_where_there_is_no_charge_to_read():
    caps = dict(held_tail_before_ms={"0.3": 0.030})
    late = _outcome(0.27, 45.0, {"reference": 15.0, "candidate": 16.0})
    assert phases_timing._charge_share(_flow("cpu", **caps), late) is None
    off = SimpleNamespace(device="cuda", policy=Policy(disabled_steps=frozenset({"device_sync"})), meta=caps)
    assert phases_timing._charge_share(off, late) is None
    no_empty = _outcome(0.27, 45.0, {"reference": 15.0})
    assert phases_timing._charge_share(_flow(**caps), no_empty) is None  # step device_sync prices device-wide times then


def test_the_threshold_is_the_documented_one():
    assert measure.RETIME_CHARGE_SHARE == 0.01 and measure.RETIMES == 1


@pytest.fixture
def forced(monkeypatch):
    """Every window's charge reads 2 %: the judge times again, once (measure.RETIMES)."""
    monkeypatch.setattr(phases_timing, "_charge_share", lambda flow, outcome: 0.020)


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
    real_window, real_child = phases_timing._timed_window, ev.Flow._child

    def window(flow, ref, cand, baselines, lead_us):
        out = real_window(flow, ref, cand, baselines, lead_us)
        s = out.samples["candidate"]
        del s.times_ms[len(windows) + 3:]  # the two windows told apart by their call counts: 3, then 4
        windows.append((cand, len(s.times_ms)))
        return out

    def child(self, role, extra_env=None):
        if role == "candidate" and windows:  # asked for the second window's child
            order.append((windows[0][0]._closed, windows[0][0] in self.children))
        return real_child(self, role, extra_env)

    monkeypatch.setattr(phases_timing, "_timed_window", window)
    monkeypatch.setattr(ev.Flow, "_child", child)
    caplog.set_level(logging.DEBUG, logger="kernelwright.judge.phases_pricing")
    v, _ = _judge_said("rowsum_correct")
    assert v.status.value == "correct", v.log
    assert [n for _, n in windows] == [3, 4] and v.timing.n == 4
    first_child = windows[0][0]
    assert first_child is not windows[1][0] and first_child._closed
    assert order == [(True, False)]  # closed, and out of the flow's children, before the next was asked for
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(phases_pricing.SAMPLES_PREFIX)]
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
    from kernelwright.core.records import Timing
    from kernelwright.judge.verdicts import VerdictBuilder

    vb = VerdictBuilder(problem=SimpleNamespace(name="p", hash="h"), policy=Policy(), device="cuda")
    vb.numbers.update(pricing.speedups(0.260, 0.300, None))
    vb.timing = Timing(n=24, median_ms=0.260, iqr_ms=0.001, wall_ms=None, profiler_ms=None, overhead_ms=0.002, raw_median_ms=0.262)
    vb.step("device_sync", True, "device-wide synchronize")
    flow = SimpleNamespace(vb=vb)
    phases_timing._floor_from_first_window(flow, 0.270)
    assert vb.numbers["runtime_ms"] == pytest.approx(0.268) and vb.numbers["speedup_vs_eager"] == pytest.approx(0.300 / 0.268)
    assert "median stream time, 0.268 ms" in vb.steps["device_sync"].reason
    phases_timing._floor_from_first_window(flow, 0.250)  # lower than the price: nothing moves
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
    assert "the window timed in a fresh candidate child" in sync.reason and "median by 2 %" in sync.reason
    assert sum(m.startswith("importing the candidate") for m in said) == 2
