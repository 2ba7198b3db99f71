"""Timing statistics and the stopping rule, the roofline numbers, verdict records and the
authenticated channel: pure unit tests, no children."""

from __future__ import annotations

import json
import math
import os

import pytest

from kernelwright.judge import channel, roofline
from kernelwright.judge.channel import ChannelClosed, ChannelForged, ChannelTimeout, Reader, Writer
from kernelwright.judge.policy import ALL_STEPS, Policy, TimingConfig
from kernelwright.core.records import (
    BaselineSource, Guard, Resources, Status, Step, SystemInfo, Timing, Verdict, truncate,
)
from kernelwright.judge.stats import AMORTIZED_SLACK, Summary, amortized, should_stop, summarize

# -- summarize ---------------------------------------------------------------------------------


def test_summarize_empty():
    s = summarize([])
    assert s.n == 0 and math.isnan(s.median_ms) and math.isinf(s.rel_sem)


def test_summarize_few_samples_has_no_spread_estimate():
    s = summarize([3.0, 1.0, 2.0])
    assert s.n == 3 and s.median_ms == 2.0 and s.iqr_ms == 0.0 and math.isinf(s.rel_sem)


def test_summarize_median_iqr_and_rel_sem():
    samples = [float(x) for x in range(1, 9)]  # 1..8
    s = summarize(samples)
    assert s.n == 8 and s.median_ms == 4.5
    assert s.iqr_ms == pytest.approx(6.75 - 2.25)  # statistics.quantiles, exclusive method
    expected = 1.2533 * (s.iqr_ms / 1.349) / math.sqrt(8) / 4.5
    assert s.rel_sem == pytest.approx(expected)


def test_summarize_is_robust_to_one_outlier():
    s = summarize([1.0] * 20 + [1000.0])
    assert s.median_ms == 1.0 and s.iqr_ms == 0.0 and s.rel_sem == 0.0


def test_amortized_keeps_the_median_despite_honest_stalls():
    # 40 calls of 1 ms and two 30 ms stalls (5 %): the trimmed mean leaves both out
    med, trimmed, concentrated = amortized([1.0] * 38 + [30.0, 30.0])
    assert med == 1.0 and trimmed == 1.0 and not concentrated


def test_amortized_flags_time_concentrated_in_every_fourth_call():
    # the work of four calls done in every fourth: median 0.03 ms, the heavy quarter is not trimmed
    samples = [0.03, 0.03, 0.03, 4.0] * 10
    med, trimmed, concentrated = amortized(samples)
    assert concentrated and med == 0.03
    assert trimmed == pytest.approx((30 * 0.03 + 8 * 4.0) / 38)  # the two slowest of 40 left out
    assert trimmed > AMORTIZED_SLACK * med


def test_amortized_of_even_calls_is_the_median():
    med, trimmed, concentrated = amortized([0.9, 1.0, 1.1] * 10)
    assert med == 1.0 and not concentrated and trimmed < AMORTIZED_SLACK * med


def test_amortized_of_no_samples():
    med, trimmed, concentrated = amortized([])
    assert math.isnan(med) and math.isnan(trimmed) and not concentrated


def _outcome(null_ms):
    from kernelwright.judge.samples import TimingOutcome

    return TimingOutcome(samples={}, stop_reason="", recheck_failure="", rechecked=0, compile_s=None, null_ms=null_ms)


def test_harness_overhead_is_each_childs_empty_call_median():
    o = _outcome({"reference": [0.030, 0.031, 0.029], "candidate": [0.026, 0.027, 0.025]})
    assert o.overheads() == pytest.approx({"candidate": 0.026, "eager": 0.030, "compile": 0.030})


def test_harness_overhead_of_the_candidate_never_exceeds_the_reference_childs():
    # empty calls slowed inside the candidate's process (by code of its own running beside them)
    # would buy it a larger subtraction: the reference child's median caps it
    o = _outcome({"reference": [0.030, 0.030, 0.031], "candidate": [0.500, 0.400, 0.450]})
    assert o.overheads()["candidate"] == pytest.approx(0.030)


def test_harness_overhead_never_exceeds_the_empty_call_timed_before_candidate_code_ran():
    # candidate code loading the GPU from another process could slow the reference child's empty
    # calls during the rounds; the figure from the reference child's setup caps the subtraction
    o = _outcome({"reference": [0.060, 0.061, 0.059], "candidate": [0.070, 0.070, 0.070]})
    assert o.overheads(cap=0.021) == pytest.approx({"candidate": 0.021, "eager": 0.021, "compile": 0.021})
    assert o.overheads(cap=0.5)["eager"] == pytest.approx(0.060)


def test_harness_overhead_needs_empty_calls_from_both_children():
    assert _outcome({}).overheads() is None
    assert _outcome({"reference": [0.03]}).overheads() is None


def test_summarize_zero_median_gives_infinite_rel_sem():
    assert math.isinf(summarize([0.0, 0.0, 0.0, 0.0, 0.0]).rel_sem)


# -- should_stop -------------------------------------------------------------------------------

RULE = dict(min_runs=10, max_runs=100, target=0.01, budget_s=5.0, adaptive=True)


def summ(n: int, rel_sem: float = 0.5) -> Summary:
    return Summary(n=n, median_ms=1.0, iqr_ms=0.1, rel_sem=rel_sem)


def test_below_min_runs_keeps_going_within_budget():
    assert should_stop([summ(9, 0.0), summ(50, 0.0)], elapsed_s=1.0, **RULE) == (False, "")


def test_below_min_runs_stops_when_the_budget_is_spent():
    stop, reason = should_stop([summ(9)], elapsed_s=6.0, **RULE)
    assert stop and "time budget 5 s spent before 10 runs" in reason


def test_max_runs_stops():
    stop, reason = should_stop([summ(100), summ(40)], elapsed_s=1.0, **RULE)
    assert stop and reason == "reached max_runs=100"


def test_non_adaptive_stops_at_min_runs():
    stop, reason = should_stop([summ(10)], elapsed_s=0.1, **{**RULE, "adaptive": False})
    assert stop and "adaptive stopping off" in reason


def test_target_precision_reached_by_every_contender():
    stop, reason = should_stop([summ(20, 0.005), summ(20, 0.01)], elapsed_s=0.1, **RULE)
    assert stop and "relative standard error" in reason
    assert should_stop([summ(20, 0.005), summ(20, 0.02)], elapsed_s=0.1, **RULE) == (False, "")


def test_budget_stops_an_imprecise_run():
    stop, reason = should_stop([summ(20, 0.5)], elapsed_s=5.1, **RULE)
    assert stop and reason == "time budget 5 s spent"


# -- TimingConfig / Policy validation ----------------------------------------------------------


@pytest.mark.parametrize("kw, text", [
    (dict(min_runs=0), "min_runs"), (dict(min_runs=10, max_runs=5), "min_runs"), (dict(batch=0), "batch"),
    (dict(budget_s=0), "budget_s"), (dict(target_rel_sem=1.5), "target_rel_sem"), (dict(recheck=-1), "recheck"),
])
def test_timing_config_rejects_bad_values(kw, text):
    with pytest.raises(ValueError, match=text):
        TimingConfig(**kw)


def test_policy_rejects_unknown_steps_and_reports_enabled():
    with pytest.raises(ValueError, match="unknown protocol steps"):
        Policy(disabled_steps=frozenset({"no_such_step"}))
    p = Policy(disabled_steps=frozenset({"poison"}))
    assert not p.enabled("poison") and p.enabled("seeds")
    assert p.to_dict()["seeds"] == "secret" and p.to_dict()["disabled_steps"] == ["poison"]


# -- roofline ----------------------------------------------------------------------------------


def test_floor_of_bandwidth_bound_case():
    assert roofline.floor_ms(4_800_000_000, 0) == pytest.approx(1.0)  # 4.8 GB at 4.8 TB/s


def test_floor_of_compute_bound_case():
    assert roofline.floor_ms(0, 990_000_000_000) == pytest.approx(1.0)  # 990 GFLOP at 990 TFLOP/s


def test_floor_takes_the_larger_bound():
    assert roofline.floor_ms(4_800_000_000, 1_980_000_000_000) == pytest.approx(2.0)
    assert roofline.floor_ms(9_600_000_000, 990_000_000_000) == pytest.approx(2.0)


def test_floor_rejects_negative_counts():
    with pytest.raises(ValueError, match="non-negative"):
        roofline.floor_ms(-1, 0)


def test_efficiency_against_measured_ceilings():
    assert roofline.efficiency(4_300_000_000, 0, "fp32", 2.0) == pytest.approx(0.5)  # ceiling 1 ms at 4.3 TB/s
    assert roofline.efficiency(0, 51_000_000_000, "fp32", 1.0) == pytest.approx(1.0)
    assert roofline.efficiency(1, 0, "fp32", 0.0) is None


# -- records -----------------------------------------------------------------------------------


def full_verdict() -> Verdict:
    return Verdict(
        status=Status.CORRECT, problem={"name": "rowsum", "hash": "ab" * 32},
        candidate={"hash": "cd" * 32, "build_path": "raw"}, policy={**Policy().to_dict(), "device": "cpu"},
        build_s=0.5, runtime_ms=1.25, eager_ms=2.5, compile_ms=2.0, baseline_source=BaselineSource.MEASURED,
        speedup_vs_eager=2.0, speedup_vs_compile=1.6, speedup_vs_best=1.6, max_abs_error=1e-6,
        max_rel_error=1e-3, floor_ms=0.01, efficiency=0.2,
        guards=(Guard("physics_floor", False, "runtime 1.25 ms vs floor 0.01 ms"), Guard("wall_clock", False, "")),
        static_findings=({"rule": "uses_torch_op", "line": 3},),
        steps=tuple(Step(name, name != "l2_flush", "CPU backend" if name == "l2_flush" else "") for name in ALL_STEPS),
        timing=Timing(n=40, median_ms=1.25, iqr_ms=0.1, wall_ms=1.4, profiler_ms=None),
        resources=Resources(registers=32, shared_bytes=1024, spills=0),
        log="ok", system=SystemInfo(gpu=None, driver=None, cuda=None, torch="2.13.0", python="3.11.7", kernelwright="0.1.0"),
        created_at="2026-11-30T00:00:00+00:00",
    )


def test_verdict_round_trip_through_json():
    v = full_verdict()
    again = Verdict.from_dict(json.loads(v.to_json()))
    assert again == v
    assert again.to_dict() == v.to_dict()


def test_verdict_round_trip_with_nulls():
    v = Verdict(status=Status.COMPILE_ERROR, problem={"name": "p", "hash": "h"}, candidate={"hash": None, "build_path": "none"}, policy={})
    d = v.to_dict()
    assert d["status"] == "compile_error" and d["timing"] is None and d["baseline_source"] is None
    assert Verdict.from_dict(d) == v


def test_truncate_keeps_head_and_tail():
    text = "H" * 5000 + "T" * 5000
    cut = truncate(text, 1000)
    assert len(cut) < 1100 and cut.startswith("H") and cut.endswith("T") and "characters cut" in cut
    assert truncate("short", 1000) == "short"


# -- channel -----------------------------------------------------------------------------------


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_channel_round_trip(pipe):
    r, w = pipe
    key = channel.new_key()
    writer, reader = Writer(w, key), Reader(r, key)
    messages = [{"ok": True, "result": {"saved": True}}, {"ok": False, "error": {"kind": "runtime", "message": "x" * 10000}}, [1, 2.5, None]]
    for m in messages:
        writer.send(m)
    assert [reader.recv(1.0) for _ in messages] == messages


def test_forged_line_is_rejected(pipe):
    r, w = pipe
    key = channel.new_key()
    reader = Reader(r, key)
    body = json.dumps({"ok": True, "result": {"saved": True}})
    forged = {"seq": 0, "mac": channel._mac(os.urandom(32), 0, body), "body": body}  # signed with another key
    os.write(w, (json.dumps(forged) + "\n").encode())
    with pytest.raises(ChannelForged, match="failed authentication"):
        reader.recv(1.0)


def test_garbage_line_is_rejected(pipe):
    r, w = pipe
    reader = Reader(r, channel.new_key())
    os.write(w, b'{"status": "correct"}\n')
    with pytest.raises(ChannelForged, match="malformed"):
        reader.recv(1.0)


def test_replayed_message_is_rejected_as_out_of_order(pipe):
    r, w = pipe
    key = channel.new_key()
    capture_r, capture_w = os.pipe()
    try:
        Writer(capture_w, key).send({"ok": True})
        line = os.read(capture_r, 1 << 16)
    finally:
        os.close(capture_r)
        os.close(capture_w)
    reader = Reader(r, key)
    os.write(w, line + line)  # a valid seq-0 message, then the same message again
    assert reader.recv(1.0) == {"ok": True}
    with pytest.raises(ChannelForged, match="expected sequence 1"):
        reader.recv(1.0)


def test_skipped_sequence_is_rejected(pipe):
    r, w = pipe
    key = channel.new_key()
    body = json.dumps({"ok": True})
    frame = {"seq": 1, "mac": channel._mac(key, 1, body), "body": body}  # properly signed, but seq 1 first
    os.write(w, (json.dumps(frame) + "\n").encode())
    with pytest.raises(ChannelForged, match="expected sequence 0"):
        Reader(r, key).recv(1.0)


def test_timeout_and_closed(pipe):
    r, w = pipe
    reader = Reader(r, channel.new_key())
    with pytest.raises(ChannelTimeout):
        reader.recv(0.05)
    os.close(w)
    with pytest.raises(ChannelClosed):
        reader.recv(1.0)


# -- re-check schedule and the lead spin -----------------------------------------------------------


def test_timed_outputs_are_rechecked_in_rounds_0_3_15_63():
    from kernelwright.judge.measure import recheck_round

    assert [r for r in range(300) if recheck_round(r)] == [0, 3, 15, 63, 255]


def test_lead_spin_is_on_by_default_and_bounded():
    assert TimingConfig().lead_us == 200.0
    with pytest.raises(ValueError, match="lead_us"):
        TimingConfig(lead_us=-1)
    with pytest.raises(ValueError, match="lead_us"):
        TimingConfig(lead_us=20_000)


def test_no_lead_spin_on_the_cpu_backend():
    from kernelwright.judge.timing import switches_from

    sw = switches_from({"flush": True, "events": True, "sync": True, "lead_us": 200.0}, cuda=False)
    assert sw.lead_us == 0.0


def test_gpu_index_counts_within_the_judges_own_visible_devices(monkeypatch):
    from kernelwright.judge.workers import physical_gpu

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert physical_gpu(1) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert physical_gpu(0) == "3" and physical_gpu(1) == "5"
    with pytest.raises(ValueError, match="not among"):
        physical_gpu(2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ValueError, match="not among"):
        physical_gpu(0)


def test_harness_overhead_of_baselines_timed_alone_is_the_reference_childs():
    """judge.baseline times eager and compile with no candidate child: the reference child's empty
    call (capped as usual) is what both subtract."""
    from kernelwright.judge.samples import Samples, TimingOutcome

    o = TimingOutcome(samples={"eager": Samples(times_ms=[1.0]), "compile": Samples(times_ms=[0.5])}, stop_reason="", recheck_failure="",
                      rechecked=0, compile_s=None, null_ms={"reference": [0.03, 0.02, 0.04]})
    assert o.overheads() == pytest.approx({"eager": 0.03, "compile": 0.03})
    assert o.overheads(cap=0.01) == pytest.approx({"eager": 0.01, "compile": 0.01})
