"""GPU isolation: an illegal memory access and a device OOM become verdicts, and the next
evaluation starts clean; the candidate child sees exactly one GPU. Skipped without a GPU."""

from __future__ import annotations

import pytest

from conftest import judge, needs_gpu
from kernelwright.judge.records import Status

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


def test_a_timed_verdict_names_the_cpus_its_rounds_ran_on():
    """On a GPU host with enough CPUs the timed rounds run on the CPUs kept for them (judge.cpus);
    with the keeping turned off the verdict names none and is still timed."""
    import os

    from conftest import timing_policy
    from kernelwright.judge import cpus

    kept = cpus.timing_cpus(0)
    v = judge("relu", "relu_cuda", timing_policy(), device="cuda")
    assert v.status is Status.CORRECT, v.log
    assert (v.workers or {}).get("timing_cpus", []) == kept, (v.workers, kept)
    os.environ[cpus.ENV] = "off"
    try:
        off = judge("relu", "relu_cuda", timing_policy(), device="cuda")
    finally:
        del os.environ[cpus.ENV]
    assert off.status is Status.CORRECT and off.runtime_ms, off.log
    assert "timing_cpus" not in (off.workers or {})
