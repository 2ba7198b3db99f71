"""GPU memory the judge owns (judge.memory), on the CPU with a fake device size: the estimate, a
problem too large for the device refused as a problem error, admission by memory across
concurrent verdicts, reservations of dead processes dropped, and the verdict's `memory` field."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kernelwright.judge import memory
from kernelwright.judge.evaluate import evaluate
from kernelwright.judge.policy import Policy
from kernelwright.problems.loader import ProblemError

FIX = Path(__file__).parent / "fixtures"
ROWSUM = FIX / "problems" / "rowsum.py"
GIB = 2**30


def _meta(i: int, o: int, w: int = 0, p: int = 0) -> dict:
    return {"memory": {"input_bytes": i, "output_bytes": o, "param_bytes": p, "forward_peak_bytes": w}}


def test_the_estimate_grows_with_the_problem_and_holds_no_reference_outputs_on_the_gpu():
    small, large = memory.estimate(_meta(GIB // 2, GIB // 2)), memory.estimate(_meta(6 * GIB, 6 * GIB))
    t = memory.COMPARE_TEMP
    assert small.total < large.total
    assert small.reference > 2 * memory.CTX and small.candidate > memory.CTX
    # no kept references: a recompute (I + O) beside the taken output (O), or the timing pool, its refresh and a
    # re-check's recompute and taken output ((S + 1) I + 2 O + T); 6 GiB inputs get a pool of one set (memory.pool_slots)
    assert large.reference == memory.CTX + 2 * 6 * GIB + 2 * 6 * GIB + t
    assert memory.estimate(_meta(GIB, GIB)).reference == memory.CTX + 4 * GIB + 2 * GIB + t  # three sets and the refresh
    assert memory.estimate(_meta(6 * GIB, 6 * GIB), ref_pool=False).reference == memory.CTX + 6 * GIB + 2 * 6 * GIB + t
    # the candidate: inputs and their copy, output, staging and poison's one block (2 I + 3 O); timed, the pool and its
    # refresh, output and staging ((S + 1) I + 2 O); poison's old blocks (3 O and up to 1 GiB) are gone
    assert small.candidate == memory.CTX + 4 * GIB // 2 + 2 * GIB // 2
    assert memory.estimate(_meta(GIB // 2, GIB // 2), timed=False).candidate == memory.CTX + 2 * GIB // 2 + 3 * GIB // 2
    assert memory.estimate(_meta(10, 10, w=20 * GIB)).total > 40 * GIB  # the forward's own peak counts, in both children


@pytest.mark.parametrize(("input_bytes", "slots"), [(0, 3), (1, 3), (GIB, 3), (4 * GIB // 3, 3), (4 * GIB // 3 + 1, 2),
                                                    (2 * GIB, 2), (2 * GIB + 1, 1), (16 * GIB, 1), (10**15, 1)])
def test_the_timing_pool_shrinks_for_inputs_of_several_gib_and_never_below_one_set(input_bytes, slots):
    assert memory.pool_slots(input_bytes) == slots


def test_the_estimate_follows_the_pool(monkeypatch):
    # KernelBench level 1 problem 45's figures (the H200 at 73e2bba): 16 GiB in, 135 MiB out, forward peak 16.13 GiB
    i, o, w = 16 * GIB, 141705216, 17322475520
    x, t = w - i - o, min(memory.COMPARE_TEMP, 64 * 141705216)
    est = memory.estimate(_meta(i, o, w=w))
    # one pool set and its refresh (2 I) instead of four sets: timing adds nothing to the candidate's correctness-time figure
    assert est.candidate == memory.estimate(_meta(i, o, w=w), timed=False).candidate == memory.CTX + 2 * i + x + 3 * o
    assert est.reference == memory.CTX + 2 * i + x + 2 * o + t
    assert est.total < 100 * GIB  # with baselines measured in the verdict it fits a 139.8 GiB H200 (it needed 162.37 GiB)
    monkeypatch.setattr(memory, "POOL_BYTES", 1 << 50)  # the pool as it was: three sets whatever their size
    old = memory.estimate(_meta(i, o, w=w))
    assert old.candidate == memory.CTX + 4 * i + x + 2 * o and old.reference == memory.CTX + 4 * i + x + 2 * o + t
    assert old.total > 150 * GIB


def test_too_large_names_what_it_needs_and_what_the_device_has():
    est = memory.estimate(_meta(40 * GIB, 40 * GIB))
    text = memory.too_large(est, 141 * GIB, 100 * GIB)
    assert "needs about" in text and "141.00 GiB" in text and "100.00 GiB free" in text
    assert memory.too_large(memory.estimate(_meta(GIB, GIB)), 141 * GIB, None) == ""


@pytest.fixture()
def ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(memory, "POLL_S", 0.01)
    return tmp_path


def test_admission_waits_for_memory_held_by_another_verdict(ledger):
    total, order, said = 10 * GIB, [], []
    first_in, release = threading.Event(), threading.Event()

    def first():
        with memory.admitted("cuda-9", 6 * GIB, total):
            order.append("first in")
            first_in.set()
            release.wait(5)
            order.append("first out")

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(5)
    threading.Timer(0.2, release.set).start()
    with memory.admitted("cuda-9", 6 * GIB, total, say=said.append) as waited:
        order.append("second in")
    t.join(5)
    assert order == ["first in", "first out", "second in"]
    assert waited >= 0.15 and said and "waiting for GPU memory" in said[0]
    with memory.admitted("cuda-9", 4 * GIB, total):  # fits beside nothing: no wait
        with memory.admitted("cuda-9", 4 * GIB, total) as w2:  # 8 of 10 GiB: within the share, no wait
            assert w2 < 0.05
    assert json.loads((ledger / "cuda-9.mem").read_text()) == {}  # every reservation went with its block


def test_a_verdict_alone_is_admitted_whatever_it_needs_and_dead_processes_hold_nothing(ledger):
    (ledger / "cuda-8.mem").write_text(json.dumps({"x": {"pid": 2**22 + 12345, "bytes": 9 * GIB}}))  # no such process
    with memory.admitted("cuda-8", 9 * GIB, 10 * GIB) as waited:
        assert waited < 0.05
    with pytest.raises(TimeoutError):
        with memory.admitted("cuda-8", 6 * GIB, 10 * GIB):
            with memory.admitted("cuda-8", 6 * GIB, 10 * GIB, timeout_s=0.1):
                pass


def test_admission_can_be_cancelled(ledger):
    with memory.admitted("cuda-7", 6 * GIB, 10 * GIB):
        with pytest.raises(InterruptedError):
            with memory.admitted("cuda-7", 6 * GIB, 10 * GIB, cancelled=lambda: True):
                pass


def test_a_problem_too_large_for_the_device_is_a_problem_error(ledger, monkeypatch):
    monkeypatch.setenv(memory.FAKE_ENV, str(64 * 2**20))  # a 64 MiB "GPU"
    with pytest.raises(ProblemError, match=r"needs about .* more than the device's 0.06 GiB"):
        evaluate(ROWSUM, FIX / "candidates" / "rowsum_correct", Policy(time_candidate=False), device="cpu")


def test_the_verdict_states_its_memory(ledger, monkeypatch):
    monkeypatch.setenv(memory.FAKE_ENV, str(80 * GIB))
    v = evaluate(ROWSUM, FIX / "candidates" / "rowsum_correct", Policy(time_candidate=False), device="cpu")
    assert v.status.value == "correct", v.log
    m = v.to_dict()["memory"]
    assert m["device_bytes"] == 80 * GIB and m["estimate_bytes"] > 2 * memory.CTX and m["admitted_after_s"] >= 0
    rows, cols = 64, 513  # the fixture's input, fp32; its output is one sum per row
    assert m["problem"]["input_bytes"] == rows * cols * 4 and m["problem"]["output_bytes"] == rows * 4
    assert m["problem"]["footprint_bytes"] == max(m["problem"]["forward_peak_bytes"], (rows * cols + rows) * 4)
    monkeypatch.delenv(memory.FAKE_ENV)
    assert evaluate(ROWSUM, FIX / "candidates" / "rowsum_correct", Policy(time_candidate=False), device="cpu").memory is None  # CPU: off


class _StubChild:
    def __init__(self, role: str, free: int | None = None, outstanding: int = 0) -> None:
        self.config = type("C", (), {"role": role})()
        self.killed = False
        self.free = free
        self.outstanding = outstanding
        self.drained = False

    def drain(self, timeout_s: float) -> bool:
        self.drained, self.outstanding = True, 0
        return True

    def kill(self) -> None:
        self.killed = True

    def call(self, command: str, args: dict, *, timeout_s: float) -> dict:
        assert command == "memory" and not self.outstanding  # a pipelined reply is collected first
        return {"free_bytes": self.free, "total_bytes": 141 * GIB, "reserved_bytes": GIB}


def _oom_flow(free: int, outstanding: int = 0):
    from kernelwright.judge.evaluate import _Flow
    from kernelwright.judge.verdicts import VerdictBuilder

    flow = _Flow.__new__(_Flow)
    flow.device, flow.policy = "cuda", Policy()
    flow.children = [_StubChild("candidate")]
    flow.ref = _StubChild("reference", free, outstanding)
    flow.estimate = memory.estimate(_meta(GIB, GIB))
    flow.vb = VerdictBuilder.__new__(VerdictBuilder)
    flow.vb.memory = {}
    return flow


def test_an_out_of_memory_is_the_candidates_when_the_device_had_room_for_it():
    from kernelwright.judge.records import Status
    from kernelwright.judge.workers import ChildError

    exc = ChildError("oom", "CUDA out of memory. Tried to allocate 500.00 GiB", "", "candidate")
    flow = _oom_flow(100 * GIB)
    stop = flow.child_stop(exc, "case native-1")
    assert stop.status == Status.RUNTIME_ERROR and "more than the device had for it" in str(stop)
    assert flow.children[0].killed  # killed before the device was measured: nothing it held counts
    crowded = _oom_flow(GIB // 4)  # even without the candidate almost nothing is free: others hold it
    stop = crowded.child_stop(exc, "case native-1")
    assert stop.status == Status.INFRA_ERROR and "not the candidate's doing" in str(stop)
    busy = _oom_flow(100 * GIB, outstanding=1)  # the reference child still computing references (candidate setup runs beside)
    assert busy.child_stop(exc, "setting up the candidate").status == Status.RUNTIME_ERROR and busy.ref.drained


def test_forged_ledger_entries_hold_nothing_and_a_held_lock_does(ledger):
    """The ledger is a shared file candidate code could write: an entry counts only while its own
    lock file in the ledger's folder is held under flock."""
    unheld = ledger / "cuda-6.mem.x.held"
    unheld.write_text("")
    forged = {"pid1": {"pid": 1, "bytes": 9 * GIB}, "minus": {"pid": -1, "bytes": 9 * GIB},
              "unheld": {"pid": 1, "bytes": 9 * GIB, "lock": str(unheld)},
              "elsewhere": {"pid": 1, "bytes": 9 * GIB, "lock": "/etc/passwd"}, "types": {"bytes": "9"}, "list": [1, 2]}
    fifo = ledger / "cuda-6.mem.fifo.held"
    os.mkfifo(fifo)  # opening a FIFO for reading would wait for a writer: every admission would hang
    forged["fifo"] = {"bytes": 9 * GIB, "lock": str(fifo)}
    (ledger / "cuda-6.mem").write_text(json.dumps(forged))
    with memory.admitted("cuda-6", 6 * GIB, 10 * GIB, timeout_s=0.5) as waited:
        assert waited < 0.05
    (ledger / "cuda-6.mem").write_text("[not, json")
    with memory.admitted("cuda-6", 6 * GIB, 10 * GIB, timeout_s=0.5) as waited:
        assert waited < 0.05
    held = ledger / "cuda-6.mem.y.held"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)", str(held)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (ledger / "cuda-6.mem").write_text(json.dumps({"y": {"pid": holder.pid, "bytes": 6 * GIB, "lock": str(held)}}))
        with pytest.raises(TimeoutError):
            with memory.admitted("cuda-6", 6 * GIB, 10 * GIB, timeout_s=0.1):
                pass
    finally:
        holder.kill()
        holder.wait()
    with memory.admitted("cuda-6", 6 * GIB, 10 * GIB, timeout_s=0.5) as waited:  # its process gone, its lock went with it
        assert waited < 0.05
    assert not list(ledger.glob("cuda-6.mem.*-*.held"))  # our own lock files go with their reservations
    with open(held) as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_timeout_inside_an_admitted_verdict_is_not_a_wait_for_memory(ledger, monkeypatch):
    from kernelwright.judge.channel import ChannelTimeout
    from kernelwright.judge.evaluate import _Flow
    from kernelwright.judge.verdicts import VerdictBuilder

    monkeypatch.setenv(memory.FAKE_ENV, str(80 * GIB))
    flow = _Flow.__new__(_Flow)
    flow.device, flow.policy, flow.meta = "cpu", Policy(time_candidate=False), _meta(GIB, GIB)
    flow.vb = VerdictBuilder.__new__(VerdictBuilder)
    flow.say, flow.cancel = (lambda _m: None), None
    with pytest.raises(ChannelTimeout):
        with flow._admission():
            raise ChannelTimeout("a child's reply did not come")


@pytest.mark.parametrize(("input_bytes", "sets"), [(1 << 20, 3), (16 * GIB, 1)])
def test_kernelwright_baseline_times_with_the_pool_its_inputs_allow(monkeypatch, tmp_path, input_bytes, sets):
    """`kernelwright baseline` (judge.baseline.time_one) sizes the timing pool from the reference
    child's setup figures, as a verdict does; a stored record's timing key names the pool's rule."""
    from types import SimpleNamespace

    from kernelwright.judge import baseline, measure

    prob = SimpleNamespace(path=ROWSUM, name="rowsum", hash="h" * 16)

    class FakeChild:
        closed = False

        def call(self, command, args, timeout_s=None):
            assert command == "setup"
            return {"source_hash": prob.hash, "memory": {"input_bytes": input_bytes}, "lead_ok": False}

        def request_exit(self):
            pass

        def close(self):
            self.closed = True

    got = {}

    def fake_run_timing(policy, ref, cand, workdir, **kw):
        got.update(kw)
        return "outcome"

    monkeypatch.setattr(measure, "run_timing", fake_run_timing)
    child = FakeChild()
    meta, outcome = baseline.time_one(prob, "cpu", Policy(), child, tmp_path)
    assert outcome == "outcome" and child.closed
    assert got["pool_size"] == sets == memory.pool_slots(input_bytes)
    assert json.loads(baseline.timing_key(Policy()))["pool"] == [memory.POOL_SLOTS, memory.POOL_BYTES]


def test_the_estimates_comparison_temporaries_follow_the_comparisons_chunk():
    from kernelwright.judge import correctness, inputs

    assert memory.COMPARE_TEMP == 8 * 8 * correctness.CHUNK
    assert inputs.EQUAL_CHUNK <= 64 * 2**20  # the input check's torch.equal temporaries per chunk, in the candidate child
