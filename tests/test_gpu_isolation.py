"""GPU isolation: an illegal memory access and a device OOM become verdicts, and the next
evaluation starts clean; the candidate child sees exactly one GPU. Skipped without a GPU."""

from __future__ import annotations

import pytest

from conftest import judge, needs_gpu
from kernelwright.core.records import Status

pytestmark = [pytest.mark.gpu, needs_gpu(), pytest.mark.timeout(300)]


def test_illegal_memory_access_is_runtime_error_and_the_next_evaluation_is_clean():
    bad = judge("relu", "relu_illegal_access", device="cuda")
    assert bad.status is Status.RUNTIME_ERROR, bad.log
    assert "illegal" in bad.log.lower() or "cuda" in bad.log.lower(), bad.log
    good = judge("relu", "relu_cuda", device="cuda")
    assert good.status is Status.CORRECT, good.log


def test_device_oom_is_runtime_error_about_memory():
    v = judge("relu", "relu_gpu_oom", device="cuda")
    assert v.status is Status.RUNTIME_ERROR, v.log
    assert "memory" in v.log.lower(), v.log


def test_verdict_names_the_gpu():
    v = judge("relu", "relu_cuda", device="cuda")
    assert v.system.gpu and v.system.driver, v.system
