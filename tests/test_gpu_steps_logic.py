"""The logic of GPU-only steps (harness_overhead's subtraction, kernel_provenance's and physics_floor's refusals) run
without a GPU: the phases' functions on a fake flow with canned child replies. What the children
measure is tested on the GPU (tests/test_protocol_steps.py); this is what the judge makes of it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelwright.judge import phases_pricing, pricing
from kernelwright.judge.guards import kernel_provenance, physics_floor, wall_clock
from kernelwright.judge.samples import Samples, TimingOutcome
from kernelwright.judge.policy import Policy
from kernelwright.judge.verdicts import Stop, VerdictBuilder


def _flow(tmp_path: Path, policy: Policy | None = None, meta: dict | None = None, sources: tuple[str, ...] = ()):
    model_new = tmp_path / "model_new.py"
    model_new.write_text("import torch\n")
    files = SimpleNamespace(sources=tuple(SimpleNamespace(text=t) for t in sources), model_new=model_new, root=tmp_path)
    policy = policy or Policy()
    vb = VerdictBuilder(problem=SimpleNamespace(name="p", hash="h"), policy=policy, device="cuda")
    return SimpleNamespace(vb=vb, policy=policy, device="cuda", meta=meta or {}, files=files, retimed=[])


def _samples(times):
    s = Samples()
    s.add_batch(sum(times) * 1.2, list(times))
    return s


def _outcome(cand, eager, null_ref, null_cand):
    samples = {"candidate": _samples(cand)}
    if eager is not None:
        samples["eager"] = _samples(eager)
    return TimingOutcome(samples=samples, stop_reason="", recheck_failure="", rechecked=0, compile_s=None,
                         null_ms={"reference": null_ref, "candidate": null_cand})


def test_the_subtraction_reaches_runtime_speedups_and_timing(tmp_path):
    flow = _flow(tmp_path, meta={"null_before_ms": 0.030})
    out = _outcome([0.30] * 9, [0.42] * 9, [0.020] * 6, [0.025] * 6)
    phases_pricing.fill_numbers(flow, out)
    n, t = flow.vb.numbers, flow.vb.timing
    assert n["runtime_ms"] == pytest.approx(0.28) and n["eager_ms"] == pytest.approx(0.40)
    assert n["speedup_vs_eager"] == pytest.approx(0.40 / 0.28)
    assert (t.median_ms, t.raw_median_ms, t.overhead_ms) == pytest.approx((0.28, 0.30, 0.020))
    step = flow.vb.steps["harness_overhead"]
    assert step.ran and "0.02 ms from the baselines" in step.reason and "0.03 ms in the reference child before" in step.reason


def test_the_setup_figure_caps_an_inflated_reference_child(tmp_path):
    flow = _flow(tmp_path, meta={"null_before_ms": 0.020})
    out = _outcome([0.30] * 9, [0.50] * 9, [0.200] * 6, [0.200] * 6)  # empty calls slowed during the rounds
    phases_pricing.fill_numbers(flow, out)
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.28) and flow.vb.numbers["eager_ms"] == pytest.approx(0.48)


def test_without_baselines_the_step_names_only_the_candidate(tmp_path):
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _outcome([0.30] * 9, None, [0.02] * 6, [0.02] * 6))
    reason = flow.vb.steps["harness_overhead"].reason
    assert "from the baselines" not in reason and "0.02 ms from the candidate" in reason


def test_a_median_not_above_the_empty_call_is_said_and_clamped(tmp_path):
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _outcome([0.010] * 9, [0.40] * 9, [0.02] * 6, [0.02] * 6))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(pricing.MIN_MS)
    assert "candidate's median 0.01 ms is not above it" in flow.vb.steps["harness_overhead"].reason


def test_switched_off_nothing_is_subtracted(tmp_path):
    flow = _flow(tmp_path, Policy(disabled_steps=frozenset({"harness_overhead"})))
    phases_pricing.fill_numbers(flow, _outcome([0.30] * 9, [0.42] * 9, [0.02] * 6, [0.02] * 6))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.30) and flow.vb.timing.overhead_ms is None
    assert not flow.vb.steps["harness_overhead"].ran


OWN = "__global__ void my_relu(const float* x, float* y, long n) {}"
ATEN = "void at::native::vectorized_elementwise_kernel<4, at::native::launch_clamp_scalar, std::array<char*, 2ul> >(int)"


def test_provenance_refuses_aten_time_and_names_its_share(tmp_path):
    flow = _flow(tmp_path, sources=(OWN,))
    with pytest.raises(Stop) as stop:
        kernel_provenance.apply(flow, [["my_relu(float const*, float*, long)", 0.3, 7], [ATEN, 0.1, 7]])
    assert stop.value.status.value == "rejected" and "aten 25.0 %" in str(stop.value)
    g = next(g for g in flow.vb.guards if g.name == "kernel_provenance")
    assert g.fired and "not allowed by the policy: aten" in g.detail


def test_provenance_accepts_own_kernels_and_allowed_torch(tmp_path):
    flow = _flow(tmp_path, sources=(OWN,))
    kernel_provenance.apply(flow, [["my_relu(float const*, float*, long)", 0.3, 7], ["Memset (Device)", 0.01, 7]])
    assert not next(g for g in flow.vb.guards if g.name == "kernel_provenance").fired
    assert "candidate 96.8 %" in flow.vb.steps["kernel_provenance"].reason
    allowed = _flow(tmp_path, Policy(allow_torch_compute=True), sources=(OWN,))
    kernel_provenance.apply(allowed, [[ATEN, 0.1, 7], ["sm90_xmma_gemm_f32f32_cublas", 0.2, 7]])
    assert not next(g for g in allowed.vb.guards if g.name == "kernel_provenance").fired


def test_provenance_reads_load_inline_sources_from_model_new(tmp_path):
    flow = _flow(tmp_path)
    flow.files.model_new.write_text('from torch.utils.cpp_extension import load_inline\nSRC = r"""\n#include <cuda_runtime.h>\n'
                                    '__global__ void inline_relu(float* y) {}\n"""\n')
    kernel_provenance.apply(flow, [["inline_relu(float*)", 0.3, 7]])
    assert "candidate 100.0 %" in flow.vb.steps["kernel_provenance"].reason


# -- step device_sync: the stream's own end event, charged the device-wide one when work runs on --

def _synced_samples(stream, synced):
    s = Samples()
    s.add_batch(sum(synced) * 1.2, list(stream), synced_ms=list(synced))
    return s


def _sync_outcome(cand, eager, null_ref, null_cand):
    """cand, eager, null_*: (stream times, device-wide times)."""
    samples = {"candidate": _synced_samples(*cand)}
    if eager is not None:
        samples["eager"] = _synced_samples(*eager)
    return TimingOutcome(samples=samples, stop_reason="", recheck_failure="", rechecked=0, compile_s=None,
                         null_ms={"reference": list(null_ref[0]), "candidate": list(null_cand[0])},
                         null_synced_ms={"reference": list(null_ref[1]), "candidate": list(null_cand[1])})


NULL = ([0.0013] * 6, [0.0143] * 6)  # the empty call: 1.3 us between its events, 13 us more to the device-wide end


def test_honest_calls_keep_their_stream_time_and_a_slow_wake_does_not_move_the_median(tmp_path):
    stream = [0.270] * 10
    synced = [0.285] * 7 + [0.320, 0.330, 0.300]  # three calls where the host woke late (seen on the H200: p90 tails of 20-55 us)
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.404] * 10, [0.421] * 10), NULL, NULL))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.270 - 0.0013)
    assert flow.vb.numbers["eager_ms"] == pytest.approx(0.404 - 0.0013)
    step = flow.vb.steps["device_sync"]
    assert step.ran and "candidate 3 of 10" in step.reason and "eager 0 of 10 late, not charged" in step.reason
    guard = next(g for g in flow.vb.guards if g.name == "device_sync")
    assert not guard.fired


def test_late_device_wide_ends_are_charged_to_the_candidate_never_to_a_baseline(tmp_path):
    """Pricing version 2 (judge.pricing): a baseline is the judge's own torch code on the timed stream,
    so its late device-wide ends are the host's, not hidden work; charged, they put torch.compile up to
    2.8 % above do_bench (benchmarks/results/dobench.md). The candidate's are still charged."""
    late = [0.404 + 0.013 + 0.050] * 10  # every call's device-wide end 50 us past the tail: far beyond the margin
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome(([0.404] * 10, late), ([0.404] * 10, late), NULL, NULL))
    assert flow.vb.numbers["eager_ms"] == pytest.approx(0.404 - 0.0013)  # its stream time
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.404 + 0.050 - 0.010 - 0.0013)  # charged past the 10 us margin
    assert "eager 10 of 10 late, not charged" in flow.vb.steps["device_sync"].reason


def test_an_honest_judgement_where_half_the_calls_woke_just_past_the_margin_keeps_its_price(tmp_path):
    """H200, 55ceb19: one softmax judgement in ten had 12 of 24 calls past the margin; charged
    their whole lateness, its price was 2.3 % above the other nine's. A call is charged only the
    lateness beyond the margin, so the price moves by what the calls exceed it, here 2 us."""
    stream = [0.270] * 24
    synced = [0.270 + 0.013 + 0.003] * 12 + [0.270 + 0.013 + 0.012] * 12  # tails 3 and 12 us past the 13 us base; margin 10 us
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.404] * 24, [0.421] * 24), NULL, NULL))
    assert "candidate 12 of 24" in flow.vb.steps["device_sync"].reason
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.270 + 0.001 - 0.0013)  # median of 0.270 and 0.272, less the overhead
    assert not next(g for g in flow.vb.guards if g.name == "device_sync").fired


def test_side_work_between_one_and_two_margins_late_is_charged_and_fires_the_guard(tmp_path):
    """A 0.1 ms call, every call 15 us late against a 10 us margin (a tenth of the call, so also the
    guard's threshold): charged 5 us each, and the guard fires on the lateness (a guard on the 5 us
    the charge moved the median would stay quiet)."""
    stream = [0.100] * 24
    synced = [0.100 + 0.013 + 0.015] * 24
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.404] * 24, [0.421] * 24), NULL, NULL))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.100 + 0.005 - 0.0013)
    guard = next(g for g in flow.vb.guards if g.name == "device_sync")
    assert guard.fired and "15 us late" in guard.detail, guard.detail


def test_work_past_the_stream_end_is_charged_and_the_guard_fires(tmp_path):
    stream = [0.005] * 10  # returns at once; 2 ms of work on a side stream
    synced = [2.015] * 10
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.404] * 10, [0.421] * 10), NULL, NULL))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(2.015 - 0.013 - 0.005 - 0.0013)  # less the tail base and the 5 us margin
    assert flow.vb.numbers["speedup_vs_eager"] < 1
    guard = next(g for g in flow.vb.guards if g.name == "device_sync")
    assert guard.fired and "past its own stream's end" in guard.detail


def test_side_work_in_a_minority_of_calls_is_priced_by_the_mean(tmp_path):
    stream = [0.005] * 40  # the work of four calls on a side stream in every fourth call
    synced = [0.0163, 0.0163, 0.0163, 1.2] * 10
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.404] * 40, [0.421] * 40), NULL, NULL))
    assert flow.vb.numbers["runtime_ms"] > 0.25
    assert next(g for g in flow.vb.guards if g.name == "amortized_time").fired


def test_a_candidate_cannot_widen_its_allowance_by_slowing_its_own_empty_calls(tmp_path):
    slowed = ([0.0013] * 6, [0.2013] * 6)  # 200 us from the stream end to the device-wide end in its own process
    stream, synced = [0.100] * 10, [0.213] * 10  # 100 us of side work past the stream's end
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.404] * 10, [0.421] * 10), NULL, slowed))
    # its base is capped at the reference child's 13 us plus 5 us: the 100 us tail is charged
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.213 - 0.018 - 0.010 - 0.0013)
    assert next(g for g in flow.vb.guards if g.name == "device_sync").fired


# the reference child's held calls at setup, before any candidate code ran: length ms -> tail ms
BEFORE = {"held_tail_before_ms": {"0.1": 0.016, "0.3": 0.024, "1.0": 0.074, "3.0": 0.084, "10.0": 0.028}}


def _held(out, **tails_ms):
    """Give an outcome held calls: name "role_contender" -> (length ms, tail ms), six calls each."""
    for key, (length, tail) in tails_ms.items():
        role, contender = key.split("_", 1)
        out.held[f"{role}:{contender}"] = ([length] * 6, [length + tail] * 6)
    return out


def test_a_long_honest_call_is_compared_with_a_held_call_of_its_length(tmp_path):
    """An honest 3.2 ms matmul whose host woke 60-70 us after the GPU finished, where the empty call's
    tail was 18 us (H200, 8f5dc55: every call of candidate, eager and compile was charged)."""
    stream, synced = [3.20] * 10, [3.268] * 10
    eager = ([2.70] * 10, [2.765] * 10)
    flow = _flow(tmp_path)
    plain = _sync_outcome((stream, synced), eager, NULL, NULL)
    phases_pricing.fill_numbers(flow, plain)
    assert flow.vb.numbers["runtime_ms"] > 3.20 + 0.040  # the behaviour the held calls replace: every call charged
    flow = _flow(tmp_path, meta=BEFORE)
    out = _held(_sync_outcome((stream, synced), eager, NULL, NULL), candidate_candidate=(3.2, 0.066), reference_candidate=(3.2, 0.064),
                reference_eager=(2.7, 0.063))
    phases_pricing.fill_numbers(flow, out)
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(3.20 - 0.0013)
    assert flow.vb.numbers["eager_ms"] == pytest.approx(2.70 - 0.0013)
    step = flow.vb.steps["device_sync"]
    assert "candidate 0 of 10" in step.reason and "eager 0 of 10" in step.reason and "held as long" in step.reason
    assert not next(g for g in flow.vb.guards if g.name == "device_sync").fired


def test_an_honest_long_call_whose_child_woke_late_is_charged_without_firing_the_guard(tmp_path):
    """The matmul control's false alarm (H200, 55ceb19 and 8a9c185): its child's held calls at
    setup had 20 us tails, its 3.2 ms calls then woke 70-80 us late. Each call pays its lateness
    beyond the margin; a 60 us median lateness is under a tenth of the call, so no guard fires."""
    stream, synced = [3.20] * 10, [3.20 + 0.080] * 10
    flow = _flow(tmp_path, meta=BEFORE)
    out = _held(_sync_outcome((stream, synced), ([2.70] * 10, [2.765] * 10), NULL, NULL), candidate_candidate=(3.2, 0.020),
                reference_candidate=(3.2, 0.018), reference_eager=(2.7, 0.063))
    phases_pricing.fill_numbers(flow, out)
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(3.20 + 0.080 - 0.020 - 0.010 - 0.0013)  # charged 50 us
    assert "candidate 10 of 10" in flow.vb.steps["device_sync"].reason
    assert not next(g for g in flow.vb.guards if g.name == "device_sync").fired


def test_side_work_of_more_than_a_tenth_of_a_long_call_fires_the_guard(tmp_path):
    stream, synced = [3.20] * 10, [3.20 + 0.020 + 0.400] * 10  # 400 us past the stream's end, beyond a 20 us base
    flow = _flow(tmp_path, meta=BEFORE)
    out = _held(_sync_outcome((stream, synced), ([2.70] * 10, [2.765] * 10), NULL, NULL), candidate_candidate=(3.2, 0.020),
                reference_candidate=(3.2, 0.018), reference_eager=(2.7, 0.063))
    phases_pricing.fill_numbers(flow, out)
    guard = next(g for g in flow.vb.guards if g.name == "device_sync")
    assert guard.fired and "320 us" in guard.detail, guard.detail
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(3.20 + 0.420 - 0.020 - 0.010 - 0.0013)  # less its own 20 us base and the margin


def test_an_honest_softmax_whose_calls_came_just_past_the_margin_is_charged_without_a_flag(tmp_path):
    """The 0.27 ms softmax control at fec5d40 (zoo_cuda_fec5d40.json): its median call 10.1 us late
    against a 10 us margin. Charged the little beyond the margin; a tenth of the call is 27 us."""
    stream = [0.270] * 24
    synced = [0.270 + 0.013 + 0.015] * 24
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.404] * 24, [0.421] * 24), NULL, NULL))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.270 + 0.005 - 0.0013)
    assert not next(g for g in flow.vb.guards if g.name == "device_sync").fired


def test_the_guards_lateness_threshold_is_the_margin_or_a_tenth_of_the_call():
    from kernelwright.judge.samples import late_threshold

    assert late_threshold(0.004) == pytest.approx(0.005)
    assert late_threshold(0.05) == pytest.approx(0.005)
    assert late_threshold(0.1) == pytest.approx(0.010)
    assert late_threshold(0.27) == pytest.approx(0.027)
    assert late_threshold(3.2) == pytest.approx(0.320)


def test_a_candidate_cannot_widen_its_allowance_by_slowing_its_own_held_calls(tmp_path):
    stream, synced = [3.20] * 10, [3.70] * 10  # 0.5 ms of side work past the stream's end
    flow = _flow(tmp_path, meta=BEFORE)
    out = _held(_sync_outcome((stream, synced), ([2.70] * 10, [2.765] * 10), NULL, NULL), candidate_candidate=(3.2, 0.6),
                reference_candidate=(3.2, 0.064), reference_eager=(2.7, 0.063))
    assert out.tail_bases(None, BEFORE["held_tail_before_ms"])["candidate"] == pytest.approx(0.064 + 0.005)
    phases_pricing.fill_numbers(flow, out)
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(3.70 - 0.069 - 0.010 - 0.0013)
    assert next(g for g in flow.vb.guards if g.name == "device_sync").fired


class _HeldChild:
    """A child that answers held-call batches: each call as long as asked, 20 us of tail."""

    def __init__(self):
        self.asked = []

    def call(self, cmd, args, timeout_s, answers=None, found=None):
        if cmd == "check":  # the watch the judge sends the candidate's child after each batch
            return {}
        self.asked.append(args["hold_us"])
        n = len(args["calls"])
        return {"times_ms": [args["hold_us"] / 1e3] * n, "synced_ms": [args["hold_us"] / 1e3 + 0.02] * n}


def test_held_calls_are_timed_only_for_contenders_of_at_least_a_tenth_of_a_millisecond():
    from kernelwright.judge import measure

    ref, cand = _HeldChild(), _HeldChild()
    r = measure._Rounds(Policy(), ref, cand, Path("."), ["candidate", "eager"], lead_us=0.0, cuda=True, held=(True, True))
    r.samples["candidate"].times_ms.extend([3.2] * 5)
    r.samples["eager"].times_ms.extend([0.05] * 5)  # too short to hold
    r.held_batch(3)  # the policy's lead before the start event is off, the spin kernel loaded: held calls run
    assert cand.asked == [pytest.approx(3200.0)] and ref.asked == [pytest.approx(3200.0)]
    assert set(r.held) == {"candidate:candidate", "reference:candidate"}
    r2 = measure._Rounds(Policy(), _HeldChild(), _HeldChild(), Path("."), ["candidate"], lead_us=200.0, cuda=True, held=(False, True))
    r2.samples["candidate"].times_ms.extend([3.2] * 5)
    r2.held_batch(3)  # no spin kernel in one of the children: nothing to hold with
    assert r2.held == {}
    slow = _HeldChild()
    r3 = measure._Rounds(Policy(), _HeldChild(), slow, Path("."), ["candidate"], cuda=True, held=(True, True))
    r3.samples["candidate"].times_ms.extend([2000.0] * 5)  # a 2 s candidate is held 10 ms, not 2 s
    r3.held_batch(3)
    assert slow.asked == [pytest.approx(10_000.0)]


def test_a_slowed_reference_child_cannot_widen_the_candidates_held_allowance():
    """Candidate code in its own process can load the CPUs or the GPU while the reference child
    times its held calls and so lengthen their tails; the setup figures, from before any candidate
    code ran, cap them."""
    stream = [3.20] * 10
    out = _held(_sync_outcome((stream, [3.7] * 10), ([2.70] * 10, [2.765] * 10), NULL, NULL),
                candidate_candidate=(3.2, 0.6), reference_candidate=(3.2, 0.55))
    bases = out.tail_bases(None, BEFORE["held_tail_before_ms"])
    assert bases["candidate"] == pytest.approx(0.084 + 0.005)  # 3.2 ms brackets up to 10 ms: the largest tail of them all at setup, plus the slack
    assert out.tail_bases(None, None)["candidate"] == pytest.approx(0.0143 - 0.0013)  # no setup figures: the empty call's tail


def test_held_calls_of_another_length_do_not_count():
    # held at a running median of 3 ms in early rounds; the final median is 0.3 ms
    out = _held(_sync_outcome(([0.3] * 10, [0.33] * 10), ([0.40] * 10, [0.421] * 10), NULL, NULL),
                candidate_candidate=(3.0, 0.08), reference_candidate=(3.0, 0.08))
    bases = out.tail_bases(None, BEFORE["held_tail_before_ms"])
    assert bases["candidate"] == pytest.approx(0.013)  # back to the empty call's tail
    assert out.held_lengths() == {}


def test_the_host_clock_of_a_reply_must_be_known_parts_of_floats():
    from kernelwright.judge.measure import _host

    assert _host({"host_ms": {"inputs": 1.5, "flush_first": 0.2}}) == {"inputs": 1.5, "flush_first": 0.2}
    for bad in ({"inputs": 10**400}, {"inputs": True}, {"inputs": 1}, {"the candidate says": 1.0}):
        assert _host({"host_ms": bad}) == {}


def test_without_empty_calls_every_device_wide_time_counts(tmp_path):
    flow = _flow(tmp_path, Policy(disabled_steps=frozenset({"harness_overhead"})))
    out = _sync_outcome(([0.270] * 10, [0.285] * 10), ([0.404] * 10, [0.421] * 10), NULL, NULL)
    out.null_synced_ms, out.null_ms = {}, {}
    phases_pricing.fill_numbers(flow, out)
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.285) and flow.vb.numbers["eager_ms"] == pytest.approx(0.421)
    assert "every call's device-wide time counts" in flow.vb.steps["device_sync"].reason
    assert not next(g for g in flow.vb.guards if g.name == "device_sync").fired


def test_device_sync_off_uses_the_stream_times(tmp_path):
    flow = _flow(tmp_path, Policy(disabled_steps=frozenset({"device_sync"})))
    phases_pricing.fill_numbers(flow, _sync_outcome(([0.005] * 10, [2.015] * 10), ([0.404] * 10, [0.421] * 10), NULL, NULL))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.005 - 0.0013)


def test_the_tail_margin_is_a_tenth_of_the_call_within_bounds():
    from kernelwright.judge.samples import tail_margin

    assert tail_margin(0.004) == pytest.approx(0.005)
    assert tail_margin(0.08) == pytest.approx(0.008)
    assert tail_margin(3.0) == pytest.approx(0.010)


def test_a_tiny_honest_kernel_with_late_wake_ups_is_not_priced_by_its_mean(tmp_path):
    """A 4 us kernel: the host woke 40 us late on 4 of 40 calls. Those calls are charged, but the
    test for a minority reads the device-wide times, where every call holds a wake-up (H200, 95216ce:
    the charged times' mean was 1.65x their median for the 1.3 us ReLU kernel)."""
    stream, synced = [0.004] * 40, [0.0173] * 36 + [0.055] * 4
    flow = _flow(tmp_path)
    phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.006] * 40, [0.0193] * 40), NULL, NULL))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.004 - 0.0013)
    assert not next(g for g in flow.vb.guards if g.name == "amortized_time").fired
    assert not next(g for g in flow.vb.guards if g.name == "device_sync").fired
    assert "candidate 4 of 40" in flow.vb.steps["device_sync"].reason


def test_the_wall_clock_is_held_against_the_device_wide_times():
    from kernelwright.judge.guards.wall_clock import wall_clock_check

    side = _synced_samples([0.005] * 10, [2.015] * 10)  # the side stream's 2 ms is in the device-wide times
    side.batches = [(2.3 * 10, 2.015 * 10, 10)]
    eager = _synced_samples([0.404] * 10, [0.421] * 10)
    eager.batches = [(0.7 * 10, 0.421 * 10, 10)]
    out = TimingOutcome(samples={"candidate": side, "eager": eager}, stop_reason="", recheck_failure="", rechecked=0, compile_s=None)
    fired, detail = wall_clock_check(out)
    assert not fired, detail
    s = Samples()
    s.add_batch(10.0, [0.1] * 10, synced_ms=[0.3] * 10)
    assert s.batches == [(10.0, pytest.approx(3.0), 10)]


def test_a_device_wide_end_before_the_stream_end_is_forged():
    from kernelwright.judge.measure import _times
    from kernelwright.judge.workers import ChildError

    ok = {"times_ms": [0.2, 0.3], "synced_ms": [0.21, 0.31]}
    assert _times(ok, 2, "candidate", "x", True) == ([0.2, 0.3], [0.21, 0.31])
    assert _times({"times_ms": [0.2, 0.3]}, 2, "candidate", "x", False) == ([0.2, 0.3], [])  # CPU, or sync off
    with pytest.raises(ChildError, match="before the stream's end"):
        _times({"times_ms": [0.2, 0.3], "synced_ms": [0.21, 0.29]}, 2, "candidate", "x", True)
    with pytest.raises(ChildError, match="device-wide times for 2 calls"):
        _times({"times_ms": [0.2, 0.3], "synced_ms": [0.21]}, 2, "candidate", "x", True)
    # a reply that leaves its device-wide times out would switch the charge off
    with pytest.raises(ChildError, match="0 device-wide times for 2 calls"):
        _times({"times_ms": [0.2, 0.3]}, 2, "candidate", "x", True)
    with pytest.raises(ChildError, match="device-wide times for 2 calls"):
        _times(ok, 2, "candidate", "x", False)
    for bad in (float("nan"), float("inf"), -0.1):
        with pytest.raises(ChildError, match="finite number"):
            _times({"times_ms": [0.2, bad], "synced_ms": [0.21, 0.31]}, 2, "candidate", "x", True)
        with pytest.raises(ChildError, match="finite number"):
            _times({"times_ms": [0.2, 0.3], "synced_ms": [0.21, bad]}, 2, "candidate", "x", True)


def test_the_wall_clock_detail_says_where_each_childs_time_went_and_ignores_malformed_clocks():
    from kernelwright.judge.guards.wall_clock import wall_clock_check
    from kernelwright.judge.measure import _host
    from kernelwright.judge.samples import host_breakdown

    cand, eager = Samples(), Samples()
    cand.add_batch(50.0, [0.3] * 10, synced_ms=[0.32] * 10, host_ms=_host({"host_ms": {"inputs": 20.0, "flush": 1.0, "call": 4.0, "output": 0.0}}))
    eager.add_batch(24.0, [0.3] * 10, synced_ms=[0.32] * 10, host_ms=_host({"host_ms": {"inputs": 18.0, "call": 4.0}}))
    text = host_breakdown(cand)
    assert text.startswith("2 inputs, 0.1 flush, 0.4 call, 0 output, 2.5 outside the loop")
    fired, detail = wall_clock_check(TimingOutcome({"candidate": cand, "eager": eager}, "", "", 0, None))
    assert fired  # 5.0 ms/call against 1.5 x (0.32 + 2.08) + 0.5 = 4.1
    assert "candidate child: 2 inputs" in detail and "eager child: 1.8 inputs" in detail
    for bad in ({"inputs": float("nan")}, {"inputs": -1.0}, {"x" * 40: 1.0}, [1.0], "fast", {str(i): 1.0 for i in range(9)}):
        assert _host({"host_ms": bad}) == {}
    assert host_breakdown(Samples()) == ""
    drained = Samples()  # the synchronize that ends a GPU batch is the batch's, not a call's
    drained.add_batch(50.0, [0.3] * 10, synced_ms=[0.32] * 10, host_ms=_host({"host_ms": {"inputs": 20.0, "call": 4.0, "drain": 6.0}}))
    text = host_breakdown(drained)
    assert text.startswith("2 inputs, 0.4 call, 2 outside the loop") and "the synchronize ending each batch: 6 ms" in text


def test_a_gpu_batch_ends_with_the_device_idle(monkeypatch):
    """timing.time_calls ends every GPU batch with a device-wide synchronize after the last call,
    inside the command the judge's wall clock covers: work a call left running (a side stream)
    finishes in its own batch, not in the next child's (where slowing the eager child's calls
    widened the candidate's wall-clock allowance). The per-call times do not include it."""
    from kernelwright.judge import timing

    seen: list[str] = []
    monkeypatch.setattr(timing, "_synchronize", lambda: seen.append("sync"))
    sw = timing.TimingSwitches(flush=False, events=False, sync=False)
    host: dict[str, float] = {}
    times = timing.time_calls(lambda: seen.append("call"), lambda _i: [], 3, cuda=True, switches=sw, host=host)
    assert len(times) == 3 and seen == ["sync", "call"] * 3 + ["sync"] and "drain" in host
    seen.clear()
    timing.time_calls(lambda: seen.append("call"), lambda _i: [], 2, cuda=False, switches=sw)
    assert seen == ["call", "call"]  # the CPU backend has no device to wait for


# -- the wall clock against the time as priced --

def _batches(stream_per_batch, synced_per_batch, wall_per_call):
    s = Samples()
    for st, sy in zip(stream_per_batch, synced_per_batch):
        s.add_batch(wall_per_call * len(st), list(st), synced_ms=list(sy))
    return s


def _priced_outcome(cand):
    eager = _batches([[0.40] * 20] * 4, [[0.42] * 20] * 4, 0.42 + 1.5)
    return TimingOutcome(samples={"candidate": cand, "eager": eager}, stop_reason="", recheck_failure="", rechecked=0, compile_s=None,
                         null_ms={"reference": list(NULL[0]), "candidate": list(NULL[0])},
                         null_synced_ms={"reference": list(NULL[1]), "candidate": list(NULL[1])})


def test_an_honest_kernel_with_one_slow_call_a_batch_is_priced_at_its_sums_not_refused(tmp_path):
    """5 ms calls with one 100 ms stall in each batch of 20: the trimming drops the stalls, the
    wall clock holds them (review of 49585a9)."""
    batch = [5.0] * 19 + [100.0]
    cand = _batches([batch] * 4, [[t + 0.015 for t in batch]] * 4, sum(batch) / 20 + 0.015 + 1.5)
    flow = _flow(tmp_path)
    out = _priced_outcome(cand)
    phases_pricing.fill_numbers(flow, out)
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(5.0 - 0.0013)
    wall_clock.apply(flow, out)  # no Stop
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(9.75 + 0.015 - 0.0013 - 0.013, rel=1e-3)
    assert flow.vb.numbers["speedup_vs_eager"] == pytest.approx((0.40 - 0.0013) / flow.vb.numbers["runtime_ms"])
    guard = next(g for g in flow.vb.guards if g.name == "wall_clock")
    assert guard.fired and "covers the wall clock" in guard.detail


def test_padded_sums_buy_nothing_and_an_under_reporting_timer_is_refused(tmp_path):
    # 2 ms of work a call reported as 0.05 ms, one device-wide value in 20 padded to cover the wall clock
    # (as few as the 5 % trimming drops, so the trimmed mean does not see them)
    stream = [[0.05] * 20] * 4
    padded = [[0.065] * 19 + [20 * 2.05 - 19 * 0.065]] * 4
    flow = _flow(tmp_path)
    out = _priced_outcome(_batches(stream, padded, 2.05 + 1.5))
    phases_pricing.fill_numbers(flow, out)
    assert flow.vb.numbers["runtime_ms"] < 0.06  # what the median and the trimmed mean say
    wall_clock.apply(flow, out)
    assert flow.vb.numbers["runtime_ms"] > 2.0 and flow.vb.numbers["speedup_vs_eager"] < 0.25
    assert next(g for g in flow.vb.guards if g.name == "wall_clock").fired
    flow = _flow(tmp_path)
    out = _priced_outcome(_batches(stream, [[0.065] * 20] * 4, 2.05 + 1.5))  # nothing padded: the sums do not cover it
    phases_pricing.fill_numbers(flow, out)
    with pytest.raises(Stop):
        wall_clock.apply(flow, out)


def test_an_honest_kernel_keeps_its_median_under_the_wall_clock(tmp_path):
    cand = _batches([[0.27] * 20] * 4, [[0.285] * 20] * 4, 0.285 + 1.45)
    flow = _flow(tmp_path)
    out = _priced_outcome(cand)
    phases_pricing.fill_numbers(flow, out)
    wall_clock.apply(flow, out)
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.27 - 0.0013)
    assert not next(g for g in flow.vb.guards if g.name == "wall_clock").fired


def test_forged_lists_and_huge_numbers_in_a_reply_are_forged_not_a_crash():
    from kernelwright.judge.measure import IdentitiesMoved, _times, moved_names
    from kernelwright.judge.workers import ChildError

    for reply in ({"times_ms": [10**400]}, {"times_ms": "fast"}, {"times_ms": [True]}, {}):
        with pytest.raises(ChildError, match="finite number|not lists"):
            _times(reply, 1, "candidate", "x", False)
    with pytest.raises(IdentitiesMoved, match="5"):
        _times({"identities_moved": 5, "times_ms": [0.1]}, 1, "candidate", "x", False)
    assert moved_names(["a", 3]) == "a, 3" and moved_names({"k": 1}) == "{'k': 1}"


def test_the_setup_bracket_takes_the_largest_tail_up_to_the_next_length():
    from kernelwright.judge.samples import TAIL_BASE_SLACK_MS, _held_ceiling

    before = {"0.1": 0.016, "0.3": 0.024, "1.0": 0.074, "3.0": 0.084, "10.0": 0.028}
    assert _held_ceiling(before, 0.3) == pytest.approx(0.024 + TAIL_BASE_SLACK_MS)
    assert _held_ceiling(before, 0.5) == pytest.approx(0.074 + TAIL_BASE_SLACK_MS)  # brackets up to 1 ms
    assert _held_ceiling(before, 20.0) == pytest.approx(0.084 + TAIL_BASE_SLACK_MS)  # past the last length: all of them
    assert _held_ceiling({**before, "10.0": 0.15}, 3.2) == pytest.approx(0.15 + TAIL_BASE_SLACK_MS)
    assert _held_ceiling({}, 1.0) is None


def test_the_baselines_are_held_even_when_the_candidate_child_says_it_has_no_spin_kernel():
    from kernelwright.judge import measure

    ref, cand = _HeldChild(), _HeldChild()
    r = measure._Rounds(Policy(), ref, cand, Path("."), ["candidate", "eager"], cuda=True, held=(True, False))
    r.samples["candidate"].times_ms.extend([3.2] * 5)
    r.samples["eager"].times_ms.extend([2.7] * 5)
    r.held_batch(3)
    assert cand.asked == [] and ref.asked == [pytest.approx(2700.0)]


def test_the_step_says_when_the_setup_held_calls_failed(tmp_path):
    flow = _flow(tmp_path, meta={"held_before_error": "RuntimeError: no spin"})
    out = _held(_sync_outcome(([3.2] * 10, [3.268] * 10), ([2.70] * 10, [2.765] * 10), NULL, NULL), candidate_candidate=(3.2, 0.066),
                reference_candidate=(3.2, 0.064), reference_eager=(2.7, 0.063))
    phases_pricing.fill_numbers(flow, out)
    reason = flow.vb.steps["device_sync"].reason
    assert "held calls at setup failed (RuntimeError: no spin)" in reason
    assert "for eager (2.7 ms)" in reason and "candidate (" not in reason.split("held as long")[1].split(";")[0]


def test_the_per_call_record_is_logged_at_debug_and_replays_to_the_judges_price(tmp_path, caplog, monkeypatch):
    """judge.samples.samples_record carries every per-call time of the timing phase; replayed by
    benchmarks/charge_replay.py it gives the price the judge set, and the older rule's price."""
    import json
    import logging

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import charge_replay

    stream = [0.270] * 24
    synced = [0.270 + 0.013 + 0.003] * 12 + [0.270 + 0.013 + 0.012] * 12
    flow = _flow(tmp_path)
    flow.vb.candidate["hash"] = "c1"
    with caplog.at_level(logging.DEBUG, logger="kernelwright.judge.phases_pricing"):
        phases_pricing.fill_numbers(flow, _sync_outcome((stream, synced), ([0.404] * 24, [0.421] * 24), NULL, NULL))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(phases_pricing.SAMPLES_PREFIX)]
    assert len(lines) == 1
    record = json.loads(lines[0][len(phases_pricing.SAMPLES_PREFIX):])
    assert record["contenders"]["candidate"]["synced_ms"] == synced and record["null_ms"]["reference"] == NULL[0]
    assert (record["problem_hash"], record["candidate_hash"]) == ("h", "c1")  # whose verdict, for a reader of a service's log
    rows = charge_replay.replay(record)
    assert rows["candidate"]["beyond_ms"] == pytest.approx(flow.vb.numbers["runtime_ms"])
    assert rows["candidate"]["beyond_charged"] == rows["candidate"]["whole_charged"] == 12
    assert rows["candidate"]["whole_ms"] == pytest.approx(0.270 + (0.012 + 0.013 - 0.013) / 2 - 0.0013)  # median of 0.270 and 0.282
    assert rows["eager"]["priced_ms"] == pytest.approx(flow.vb.numbers["eager_ms"])
    assert rows["candidate"]["priced_ms"] == pytest.approx(flow.vb.numbers["runtime_ms"])
    # without empty calls the judge prices every call at its device-wide time, and so does the replay
    bare = {**record, "null_ms": {}, "null_synced_ms": {}}
    assert charge_replay.replay(bare)["candidate"]["beyond_ms"] == pytest.approx(0.270 + 0.013 + 0.0075)
    # the record is not even made unless the debug level asks for it
    def unasked(*_a, **_k):
        raise AssertionError("samples_record called below the debug level")

    monkeypatch.setattr(phases_pricing, "samples_record", unasked)
    with caplog.at_level(logging.INFO, logger="kernelwright.judge.phases_pricing"):
        phases_pricing.fill_numbers(_flow(tmp_path), _sync_outcome((stream, synced), ([0.404] * 24, [0.421] * 24), NULL, NULL))


class _ScriptedChild:
    """A child that answers 'time' and 'check' with the given replies and records the commands."""

    def __init__(self, time_reply, check_reply):
        self.replies, self.asked = {"time": time_reply, "check": check_reply}, []

    def call(self, cmd, args, timeout_s, answers=None, found=None):
        self.asked.append(cmd)
        return self.replies[cmd]


def test_the_candidate_childs_watch_follows_each_batch_and_its_replies_must_be_mappings():
    from kernelwright.judge import measure
    from kernelwright.judge.workers import ChildError

    ok = {"times_ms": [0.1, 0.1], "synced_ms": []}
    ref, cand = _ScriptedChild(ok, {}), _ScriptedChild(ok, {})
    r = measure._Rounds(Policy(), ref, cand, Path("."), ["candidate", "eager"])
    r.batch("candidate", 2)
    r.batch("eager", 2)
    assert cand.asked == ["time", "check"] and ref.asked == ["time"]  # the reference child is not watched
    moved = _ScriptedChild(ok, {"identities_moved": ["torch.allclose"]})
    with pytest.raises(measure.IdentitiesMoved, match="torch.allclose"):
        measure._Rounds(Policy(), ref, moved, Path("."), ["candidate"]).batch("candidate", 2)
    for bad in (_ScriptedChild([0.1, 0.1], {}), _ScriptedChild(ok, [])):
        with pytest.raises(ChildError, match="not a mapping") as err:
            measure._Rounds(Policy(), ref, bad, Path("."), ["candidate"]).batch("candidate", 2)
        assert err.value.kind == "forged" and err.value.role == "candidate"


# -- physics_floor: a time below what the output's bytes take at peak bandwidth is refused ------------

N = 1 << 20  # ReLU of 2^20 float32: 4 MiB read, 4 MiB written
RELU_META = {"bytes": 8 * N, "flops": N, "output_bytes": [4 * N], "outputs": [{"dtype": "float32"}], "gpu": "NVIDIA H200"}
WRITE_FLOOR_MS = 4 * N / 4.8e12 * 1e3  # the output's bytes at the H200's 4.8 TB/s: about 0.00087 ms


def _floor_flow(tmp_path: Path, runtime_ms: float, policy: Policy | None = None, meta: dict | None = None, device: str = "cuda"):
    flow = _flow(tmp_path, policy, meta=meta or RELU_META)
    flow.device = flow.vb.device = device
    flow.vb.numbers["runtime_ms"] = runtime_ms
    return flow


def test_physics_floor_refuses_a_time_under_the_write_floor(tmp_path):
    flow = _floor_flow(tmp_path, runtime_ms=WRITE_FLOOR_MS / 10)
    with pytest.raises(Stop) as stop:
        physics_floor.apply(flow)
    assert stop.value.status.value == "rejected" and "faster than physics allows" in str(stop.value)
    g = next(g for g in flow.vb.guards if g.name == "physics_floor")
    assert g.fired and f"write floor {WRITE_FLOOR_MS:.4g} ms" in g.detail, g
    assert flow.vb.steps["physics_floor"].ran


def test_physics_floor_accepts_an_honest_time_and_reports_the_floor(tmp_path):
    flow = _floor_flow(tmp_path, runtime_ms=0.004)  # 8 MiB in 4 us: about 2.1 TB/s, an honest H200 ReLU
    physics_floor.apply(flow)  # no Stop
    g = next(g for g in flow.vb.guards if g.name == "physics_floor")
    assert not g.fired and flow.vb.steps["physics_floor"].ran
    assert flow.vb.numbers["floor_ms"] == pytest.approx(8 * N / 4.8e12 * 1e3)
    assert 0 < flow.vb.numbers["efficiency"] < 1


def test_physics_floor_reports_less_work_than_the_reference_without_refusing(tmp_path):
    # diag(a) @ b at n = 4096 done as a row scaling: under the reference's 2 n^3 FLOPs floor, over the write floor
    n = 4096
    meta = {"bytes": 3 * n * n * 4, "flops": 2 * n**3, "output_bytes": [n * n * 4], "outputs": [{"dtype": "float32"}], "gpu": "NVIDIA H200"}
    flow = _floor_flow(tmp_path, runtime_ms=0.03, meta=meta)
    physics_floor.apply(flow)  # no Stop
    g = next(g for g in flow.vb.guards if g.name == "physics_floor")
    assert not g.fired and "less work than the reference does (reported, not refused)" in g.detail, g


def test_physics_floor_takes_the_gpus_own_bandwidth_where_it_is_higher(tmp_path):
    """At 6 TB/s an honest write is under the H200's write floor but over a B200's: refused on
    neither GPU it could run at that speed on; on an H100 the H200's figure still refuses 10x under it."""
    at_6_tb_s = 4 * N / 6e12 * 1e3
    flow = _floor_flow(tmp_path, runtime_ms=at_6_tb_s, meta={**RELU_META, "gpu": "NVIDIA B200"})
    physics_floor.apply(flow)  # no Stop
    g = next(g for g in flow.vb.guards if g.name == "physics_floor")
    assert not g.fired and "at 8 TB/s" in g.detail and "B200 peaks" in g.detail, g
    flow = _floor_flow(tmp_path, runtime_ms=WRITE_FLOOR_MS / 10, meta={**RELU_META, "gpu": "NVIDIA H100 80GB HBM3"})
    with pytest.raises(Stop):
        physics_floor.apply(flow)
    g = next(g for g in flow.vb.guards if g.name == "physics_floor")
    assert g.fired and "at 4.8 TB/s" in g.detail and "H100 peaks" in g.detail, g


@pytest.mark.parametrize("device,policy", [("cpu", None), ("cuda", Policy(disabled_steps=frozenset({"physics_floor"})))])
def test_physics_floor_refuses_nothing_on_the_cpu_backend_or_switched_off(tmp_path, device, policy):
    flow = _floor_flow(tmp_path, runtime_ms=WRITE_FLOOR_MS / 10, policy=policy, device=device)
    physics_floor.apply(flow)  # no Stop
    assert not flow.vb.steps["physics_floor"].ran and not any(g.name == "physics_floor" for g in flow.vb.guards)
    assert ("CPU backend" if device == "cpu" else "switched off") in flow.vb.steps["physics_floor"].reason
