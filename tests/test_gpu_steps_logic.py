"""The logic of GPU-only steps (harness_overhead's subtraction, kernel_provenance's refusal) run
without a GPU: the phases' functions on a fake flow with canned child replies. What the children
measure is tested on the GPU (tests/test_protocol_steps.py); this is what the judge makes of it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelwright.judge import phases
from kernelwright.judge.measure import Samples, TimingOutcome
from kernelwright.judge.policy import Policy
from kernelwright.judge.verdicts import Stop, VerdictBuilder


def _flow(tmp_path: Path, policy: Policy | None = None, meta: dict | None = None, sources: tuple[str, ...] = ()):
    model_new = tmp_path / "model_new.py"
    model_new.write_text("import torch\n")
    files = SimpleNamespace(sources=tuple(SimpleNamespace(text=t) for t in sources), model_new=model_new)
    policy = policy or Policy()
    vb = VerdictBuilder(problem=SimpleNamespace(name="p", hash="h"), policy=policy, device="cuda")
    return SimpleNamespace(vb=vb, policy=policy, device="cuda", meta=meta or {}, files=files)


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
    phases._fill_numbers(flow, out)
    n, t = flow.vb.numbers, flow.vb.timing
    assert n["runtime_ms"] == pytest.approx(0.28) and n["eager_ms"] == pytest.approx(0.40)
    assert n["speedup_vs_eager"] == pytest.approx(0.40 / 0.28)
    assert (t.median_ms, t.raw_median_ms, t.overhead_ms) == pytest.approx((0.28, 0.30, 0.020))
    step = flow.vb.steps["harness_overhead"]
    assert step.ran and "0.02 ms from the baselines" in step.reason and "0.03 ms in the reference child before" in step.reason


def test_the_setup_figure_caps_an_inflated_reference_child(tmp_path):
    flow = _flow(tmp_path, meta={"null_before_ms": 0.020})
    out = _outcome([0.30] * 9, [0.50] * 9, [0.200] * 6, [0.200] * 6)  # empty calls slowed during the rounds
    phases._fill_numbers(flow, out)
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.28) and flow.vb.numbers["eager_ms"] == pytest.approx(0.48)


def test_without_baselines_the_step_names_only_the_candidate(tmp_path):
    flow = _flow(tmp_path)
    phases._fill_numbers(flow, _outcome([0.30] * 9, None, [0.02] * 6, [0.02] * 6))
    reason = flow.vb.steps["harness_overhead"].reason
    assert "from the baselines" not in reason and "0.02 ms from the candidate" in reason


def test_a_median_not_above_the_empty_call_is_said_and_clamped(tmp_path):
    flow = _flow(tmp_path)
    phases._fill_numbers(flow, _outcome([0.010] * 9, [0.40] * 9, [0.02] * 6, [0.02] * 6))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(phases.MIN_MS)
    assert "candidate's median 0.01 ms is not above it" in flow.vb.steps["harness_overhead"].reason


def test_switched_off_nothing_is_subtracted(tmp_path):
    flow = _flow(tmp_path, Policy(disabled_steps=frozenset({"harness_overhead"})))
    phases._fill_numbers(flow, _outcome([0.30] * 9, [0.42] * 9, [0.02] * 6, [0.02] * 6))
    assert flow.vb.numbers["runtime_ms"] == pytest.approx(0.30) and flow.vb.timing.overhead_ms is None
    assert not flow.vb.steps["harness_overhead"].ran


OWN = "__global__ void my_relu(const float* x, float* y, long n) {}"
ATEN = "void at::native::vectorized_elementwise_kernel<4, at::native::launch_clamp_scalar, std::array<char*, 2ul> >(int)"


def test_provenance_refuses_aten_time_and_names_its_share(tmp_path):
    flow = _flow(tmp_path, sources=(OWN,))
    with pytest.raises(Stop) as stop:
        phases._provenance_guard(flow, [["my_relu(float const*, float*, long)", 0.3, 7], [ATEN, 0.1, 7]])
    assert stop.value.status.value == "rejected" and "aten 25.0 %" in str(stop.value)
    g = next(g for g in flow.vb.guards if g.name == "kernel_provenance")
    assert g.fired and "not allowed by the policy: aten" in g.detail


def test_provenance_accepts_own_kernels_and_allowed_torch(tmp_path):
    flow = _flow(tmp_path, sources=(OWN,))
    phases._provenance_guard(flow, [["my_relu(float const*, float*, long)", 0.3, 7], ["Memset (Device)", 0.01, 7]])
    assert not next(g for g in flow.vb.guards if g.name == "kernel_provenance").fired
    assert "candidate 96.8 %" in flow.vb.steps["kernel_provenance"].reason
    allowed = _flow(tmp_path, Policy(allow_torch_compute=True), sources=(OWN,))
    phases._provenance_guard(allowed, [[ATEN, 0.1, 7], ["sm90_xmma_gemm_f32f32_cublas", 0.2, 7]])
    assert not next(g for g in allowed.vb.guards if g.name == "kernel_provenance").fired


def test_provenance_reads_load_inline_sources_from_model_new(tmp_path):
    flow = _flow(tmp_path)
    flow.files.model_new.write_text('from torch.utils.cpp_extension import load_inline\nSRC = r"""\n#include <cuda_runtime.h>\n'
                                    '__global__ void inline_relu(float* y) {}\n"""\n')
    phases._provenance_guard(flow, [["inline_relu(float*)", 0.3, 7]])
    assert "candidate 100.0 %" in flow.vb.steps["kernel_provenance"].reason
