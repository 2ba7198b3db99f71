"""The op audit: one forward under a dispatch mode in the candidate child; torch compute is refused
unless the policy allows it, allocation and views are not. CPU, real children."""

from __future__ import annotations

import pytest

from conftest import JUDGE_TIMEOUT_S, judge
from kernelwright.judge import ops
from kernelwright.judge.policy import Policy
from kernelwright.core.records import Status

STRICT = dict(time_candidate=False, compile_baseline=False, baselines="skip")  # the default: torch compute refused


def _step(v, name):
    return next(s for s in v.steps if s.name == name)


def _guard(v, name):
    return next((g for g in v.guards if g.name == name), None)


def test_allow_list_keeps_allocation_views_and_copies_and_nothing_that_computes():
    seen = {"aten::empty.memory_format": 1, "aten::t": 1, "aten::clone": 1, "aten::mm": 2, "aten::sum.dim_IntList": 1,
            "aten::_to_copy[convert]": 1, "aten::full": 1}
    assert ops.disallowed(seen) == {"aten::_to_copy[convert]": 1, "aten::mm": 2, "aten::sum.dim_IntList": 1}
    assert ops.describe({"aten::mm": 2, "aten::add.Tensor": 1}) == "aten::mm x2, aten::add.Tensor x1"


def test_profiled_operators_count_only_outside_the_allow_list():
    # the child marks a profiled operator only when nothing of it reached the dispatch mode
    seen = {"profiled:aten::movedim": 1, "profiled:aten::contiguous": 1, "profiled:aten::to": 1, "profiled:aten::sum": 2}
    assert ops.disallowed(seen) == {"aten::sum[unseen by the mode]": 2}
    assert ops.split_profiled({"aten::mm": 1, "profiled:aten::sum": 1}) == ({"aten::mm": 1}, {"aten::sum": 1})


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_a_raw_kernel_passes_the_audit():
    v = judge("rowsum", "rowsum_correct", Policy(**STRICT))
    assert v.status is Status.CORRECT, v.log
    assert _guard(v, "op_audit").fired is False and "aten::empty" in _step(v, "op_audit").reason


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_composite_views_pass_the_profiler_cross_check_and_a_switched_off_mode_does_not():
    # movedim and .mT reach the profiler under their own names and the dispatch mode as permute and
    # transpose: allowed. Work done with dispatch modes switched off reaches only the profiler.
    ok = judge("rowsum", "rowsum_composite_views", Policy(**STRICT))
    assert ok.status is Status.CORRECT and not _guard(ok, "op_audit").fired, ok.log
    hidden = judge("rowsum", "zoo_audit_switched_off", Policy(**STRICT))
    assert hidden.status is Status.REJECTED and "unseen by the mode" in hidden.log, hidden.log


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_torch_compute_is_refused_passes_with_the_step_off_and_is_reported_when_allowed():
    on = judge("rowsum", "rowsum_torch", Policy(**STRICT))
    assert on.status is Status.REJECTED and ("aten::mv" in on.log or "aten::mm" in on.log), on.log
    assert _guard(on, "op_audit").fired
    off = judge("rowsum", "rowsum_torch", Policy(**STRICT, disabled_steps=frozenset({"op_audit"})))
    assert off.status is Status.CORRECT and _step(off, "op_audit").ran is False, off.log
    allowed = judge("rowsum", "rowsum_torch", Policy(**STRICT, allow_torch_compute=True))
    assert allowed.status is Status.CORRECT and "allowed by the policy" in _step(allowed, "op_audit").reason


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_aten_calls_from_a_cpp_extension_are_seen_too():
    v = judge("relu", "relu_ext_aten", Policy(**STRICT))
    assert v.status is Status.REJECTED and "aten::relu" in v.log, v.log


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
@pytest.mark.parametrize("fixture,evidence", [
    ("rowsum_audit_dodger", "aten::sum"),  # torch except on inputs seen before: the audit's are fresh
    ("rowsum_thread_compute", "threads"),  # torch in a helper thread the dispatch mode does not watch
])
def test_audit_dodges_are_refused_and_pass_with_the_step_off(fixture, evidence):
    on = judge("rowsum", fixture, Policy(**STRICT))
    assert on.status is Status.REJECTED and evidence in on.log, on.log
    off = judge("rowsum", fixture, Policy(**STRICT, disabled_steps=frozenset({"op_audit"})))
    assert off.status is Status.CORRECT, off.log


def test_conversions_are_compute_and_layout_copies_are_not():
    import torch

    x = torch.randn(4, 4)
    assert ops.audit_name("aten::_to_copy", (x,), {"dtype": torch.float64}).endswith("[convert]")
    assert ops.audit_name("aten::_to_copy", (x,), {"memory_format": torch.channels_last}) == "aten::_to_copy"
    assert ops.audit_name("aten::copy_", (x, x.double()), {}).endswith("[convert]")
    assert ops.audit_name("aten::copy_", (x, x.t()), {}) == "aten::copy_"
    assert ops.disallowed({"aten::copy_[convert]": 1, "aten::copy_": 1}) == {"aten::copy_[convert]": 1}


def test_the_audit_profiles_with_the_legacy_cpu_profiler(monkeypatch):
    """The audit's profiler must not be kineto's: it may leave CUPTI attached to the candidate child
    and slow every later CUDA call there, the timed ones included (docs/judge.md). Kineto's entry
    points are made to fail; the audited call must still count operators that skip the mode."""
    import torch
    import torch.autograd.profiler as autograd_profiler
    import torch.profiler

    from kernelwright.judge import child_candidate as cc

    def refuse(*_a, **_k):
        raise AssertionError("kineto profiler used")

    monkeypatch.setattr(torch.profiler, "profile", refuse)
    monkeypatch.setattr(autograd_profiler, "profile", refuse)
    monkeypatch.setattr(cc.S, "model", lambda x: x.sum(dim=1), raising=False)
    monkeypatch.setattr(cc.S, "device", torch.device("cpu"), raising=False)
    seen: dict[str, int] = {}
    out = cc._audited_call([torch.ones(3, 4)], seen)
    assert out.tolist() == [4.0, 4.0, 4.0]
    assert any("sum" in name for name in seen), seen
