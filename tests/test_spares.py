"""Spare candidate children (judge.spares): forked ahead and warmed, taken by the next evaluation of
the same device and environment, each serving one candidate, replaced when dead, gone when idle.
On the CPU backend with KERNELWRIGHT_SPARE_CHILDREN=on (the default uses them on CUDA only)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import JUDGE_TIMEOUT_S, candidate, correctness_policy, judge, needs_gpu, problem, timing_policy
from kernelwright.judge import spares
from kernelwright.judge.evaluate import evaluate
from kernelwright.judge.workers import ChildConfig

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


@pytest.fixture(autouse=True)
def spares_on(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_SPARE_CHILDREN", "on")
    spares.POOL.close()
    yield
    spares.POOL.wait_idle()
    spares.POOL.close()


def _judge(cand: str):
    verdict = evaluate(problem("rowsum"), candidate(cand), correctness_policy(), device="cpu")
    assert spares.POOL.wait_idle(), "the spare for the next evaluation was not made in time"
    return verdict


def _ready_pids() -> list[int]:
    return [s.child._proc.pid for s in spares.POOL._ready.values()]


def test_the_next_evaluation_takes_the_spare_and_none_is_used_twice():
    first = _judge("rowsum_correct")
    assert first.status.value == "correct" and first.workers["candidate"] == "new"
    (pid,) = _ready_pids()
    folder = next(iter(spares.POOL._ready.values())).workdir
    second = _judge("rowsum_wrong")
    assert second.status.value == "incorrect" and second.workers["candidate"] == "spare"
    assert pid not in _ready_pids() and len(_ready_pids()) == 1  # taken, closed with its evaluation, replaced
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not folder.exists()  # its log and working directory went with it
    statuses = [_judge(c).status.value for c in ("rowsum_taints_judge", "rowsum_correct")]
    assert statuses == ["rejected", "correct"]  # a spare carries nothing from one candidate to the next


def test_a_dead_spare_is_not_used():
    _judge("rowsum_correct")
    (pid,) = _ready_pids()
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    verdict = _judge("rowsum_correct")
    assert verdict.status.value == "correct" and verdict.workers["candidate"] == "new"


def test_another_environment_gets_no_spare(monkeypatch):
    _judge("rowsum_correct")
    monkeypatch.setenv("KERNELWRIGHT_TEST_SOMETHING", "1")  # the child's environment differs now
    verdict = _judge("rowsum_correct")
    assert verdict.workers["candidate"] == "new" and len(_ready_pids()) == 2


def test_idle_spares_go(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_SPARE_IDLE_S", "1.5")
    _judge("rowsum_correct")
    (pid,) = _ready_pids()
    deadline = time.monotonic() + 10
    while _ready_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _ready_pids()
    while time.monotonic() < deadline:  # taken out of the pool first, then closed
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_off_and_auto_and_malformed(monkeypatch, tmp_path):
    config = ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env={})
    monkeypatch.setenv("KERNELWRIGHT_SPARE_CHILDREN", "off")
    spares.POOL.refill(config)
    assert spares.POOL.wait_idle() and not _ready_pids()
    monkeypatch.setenv("KERNELWRIGHT_SPARE_CHILDREN", "auto")
    assert not spares.enabled("cpu") and spares.enabled("cuda")
    monkeypatch.setenv("KERNELWRIGHT_SPARE_CHILDREN", "sometimes")
    with pytest.raises(ValueError, match="auto, on or off"):
        spares.enabled("cpu")


@needs_gpu()
@pytest.mark.gpu
def test_on_cuda_a_spare_judges_like_a_fresh_child(monkeypatch):
    """The default (auto) on a GPU: after a candidate that poisoned its own CUDA context with an
    illegal access, the next candidate's child is the spare made meanwhile, and it is judged
    correct; a timed verdict in a spare reads the same as in a fresh child."""
    monkeypatch.setenv("KERNELWRIGHT_SPARE_CHILDREN", "auto")
    bad = judge("relu", "relu_illegal_access", device="cuda")
    assert bad.status.value == "runtime_error", bad.log
    assert spares.POOL.wait_idle()
    good = judge("relu", "relu_cuda", device="cuda")
    assert good.status.value == "correct" and good.workers["candidate"] == "spare", good.log
    assert spares.POOL.wait_idle()
    timed = judge("relu", "relu_cuda", device="cuda", policy=timing_policy())
    assert timed.status.value == "correct" and timed.workers["candidate"] == "spare" and timed.runtime_ms > 0, timed.log
