"""Spare candidate children (judge.spares): forked ahead and warmed, taken by the next evaluation of
the same device and environment, each serving one candidate, replaced when dead, gone when idle.
On the CPU backend with KERNELWRIGHT_SPARE_CHILDREN=on (the default uses them on CUDA only)."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

from conftest import JUDGE_TIMEOUT_S, candidate, correctness_policy, judge, needs_gpu, problem, timing_policy
from kernelwright.judge import refpool, sandbox, spares
from kernelwright.judge.evaluate import evaluate
from kernelwright.judge.build import cache_dir
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


def test_a_stopped_spare_is_not_used_and_its_log_is_emptied(tmp_path):
    """An earlier candidate can reach a spare made while it ran (same user): stopped, it is refused;
    whatever was written into its log is not the next candidate's."""
    _judge("rowsum_correct")
    (spare,) = spares.POOL._ready.values()
    os.kill(spare.child._proc.pid, signal.SIGSTOP)
    try:
        verdict = _judge("rowsum_correct")
        assert verdict.status.value == "correct" and verdict.workers["candidate"] == "new", verdict.log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(spare.child._proc.pid, signal.SIGCONT)
    (spare,) = spares.POOL._ready.values()
    with open(spare.child.log_path, "a") as f:
        f.write("planted by an earlier candidate\n")
    env = {"KERNELWRIGHT_CACHE": str(cache_dir()), sandbox.SPEC_ENV: sandbox.for_candidate("auto", str(cache_dir()), device="cpu").to_env()}
    config = ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env=env)
    taken = spares.POOL.take(config)  # as evaluate() takes it
    assert taken is spare and spare.child.log_path.read_text() == ""
    spare.child.close()
    spare.release()
    assert not spare.workdir.exists()


def test_a_spare_reserves_its_context_in_the_memory_ledger(monkeypatch):
    from kernelwright.judge import memory
    from kernelwright.judge.gpulock import device_key

    monkeypatch.setenv(memory.FAKE_ENV, str(64 * 2**30))  # admission on, on the CPU backend
    refpool.POOL.close()  # no idle reference child of an earlier test in the ledger
    _judge("rowsum_correct")

    def reserved() -> list[int]:
        path = memory._ledger_path(device_key("cpu", 0))
        with open(path) as f:
            return [v["bytes"] for v in memory._read(f, os.path.dirname(path)).values()]

    assert reserved() == [memory.CTX, memory.CTX]  # the ready spare's and the idle reference child's (judge.refpool), nothing else between verdicts
    spares.POOL.close()
    assert reserved() == [memory.CTX]
    refpool.POOL.close()
    assert reserved() == []


def test_shutdown_leaves_no_spare_behind(tmp_path):
    config = ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env={})
    pool = spares.SparePool()
    pool.refill(config)
    folders = list(pool._making.values())
    pool.shutdown()
    assert pool.wait_idle(30)
    assert not pool._ready and all(not f.exists() for f in folders)
    pool.refill(config)  # after shutdown: nothing more is made
    assert not pool._making


def test_malformed_settings_are_the_callers_error(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_SPARE_IDLE_S", "soon")
    with pytest.raises(ValueError, match="KERNELWRIGHT_SPARE_IDLE_S"):
        evaluate(problem("rowsum"), candidate("rowsum_correct"), correctness_policy(), device="cpu")


def test_a_traced_or_stopped_process_is_told_apart():
    import ctypes
    import subprocess

    assert spares._tracer("Name:\tx\nTracerPid:\t0\n") == 0
    assert spares._tracer("Name:\tx\n") == -1  # no such line: taken as traced
    assert spares._stopped(2**22 + 12345)  # no such process
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert not spares._stopped(proc.pid)  # running, no tracer: a spare like it is used
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(0x4206, proc.pid, None, None) != 0:  # PTRACE_SEIZE: attached, still running
            pytest.skip(f"ptrace is not allowed here (errno {ctypes.get_errno()})")
        assert spares._stopped(proc.pid)  # a tracer attached: refused
    finally:
        proc.kill()
        proc.wait()
