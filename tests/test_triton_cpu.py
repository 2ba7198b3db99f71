"""Triton candidates on the CPU backend (issue 31): the judge runs a candidate's @triton.jit
kernels through Triton's interpreter (TRITON_INTERPRET=1, set for CPU children; removed for GPU
children, whose times must be compiled code). The interpreter checks correctness and the guards
that do not need a GPU; timing on the CPU is never a claim."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="Triton is not installed: pip install -e '.[test]'")

from conftest import JUDGE_TIMEOUT_S, correctness_policy, judge  # noqa: E402
from kernelwright.core.records import Status  # noqa: E402
from kernelwright.judge.workers import ChildConfig, child_env  # noqa: E402

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


def test_triton_runs_interpreted_in_cpu_children_and_compiled_in_gpu_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # a user's setting must not reach a GPU verdict
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    cpu = child_env(ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env={}))
    gpu = child_env(ChildConfig(role="candidate", device="cuda", gpu_index=0, workdir=tmp_path, env={}))
    assert cpu["TRITON_INTERPRET"] == "1" and "TRITON_INTERPRET" not in gpu


STRICT = dict(allow_torch_compute=False)  # the default policy's rule: the candidate's own kernels do the work


def test_an_honest_triton_kernel_is_correct_under_the_strict_op_audit():
    """The interpreter's own tensor plumbing (set_, copy_, new_empty) is not torch compute."""
    v = judge("relu", "relu_triton", correctness_policy(**STRICT))
    assert v.status is Status.CORRECT, v.log


def test_a_wrong_triton_kernel_is_incorrect():
    v = judge("relu", "relu_triton_wrong", correctness_policy(**STRICT))
    assert v.status is Status.INCORRECT, v.log


def test_a_triton_launcher_that_has_torch_do_the_work_is_rejected_by_the_op_audit():
    v = judge("relu", "relu_triton_calls_torch", correctness_policy(**STRICT))
    assert v.status is Status.REJECTED and "aten::relu" in v.log, v.log
