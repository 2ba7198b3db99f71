"""GPU memory the judge owns (judge.memory), on the CPU with a fake device size: the estimate, a
problem too large for the device refused as a problem error, admission by memory across
concurrent verdicts, reservations of dead processes dropped, and the verdict's `memory` field."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelwright.judge import memory
from kernelwright.judge.evaluate import evaluate
from kernelwright.judge.policy import Policy
from kernelwright.problems.loader import ProblemError

FIX = Path(__file__).parent / "fixtures"
ROWSUM = FIX / "problems" / "rowsum.py"
GIB = 2**30


def no_wait(msg: str) -> None:
    """admitted()'s `say` where admission must come at the first look: it speaks only when it waits
    (a wall-clock bound instead failed on a loaded 2-core CI machine: 0.053 s against 0.05)."""
    raise AssertionError(f"admitted only after a wait: {msg}")


def _meta(i: int, o: int, w: int = 0, p: int = 0) -> dict:
    return {"memory": {"input_bytes": i, "output_bytes": o, "param_bytes": p, "forward_peak_bytes": w}}


def test_the_estimate_grows_with_the_problem_and_holds_no_reference_outputs_on_the_gpu():
    small, large = memory.estimate(_meta(GIB // 2, GIB // 2)), memory.estimate(_meta(6 * GIB, 6 * GIB))
    t, d = memory.COMPARE_TEMP, memory.DIGEST_TEMP + memory.SLAB_TEMP  # no output shapes listed: T is COMPARE_TEMP at these sizes
    assert small.total < large.total
    assert small.reference > memory.CTX and small.candidate > memory.CTX
    # the reference: a recompute (I + O) and the comparison's temporaries or a second output (the determinism and near
    # blindness checks), no taken output; timed, one pool set, a re-check's
    # inputs, recompute and the last timed output ((S + 1) I + 2 O + T, S = 1 with fresh inputs)
    assert large.reference == memory.CTX + 2 * 6 * GIB + 2 * 6 * GIB + t
    assert memory.estimate(_meta(GIB, GIB)).reference == memory.CTX + 2 * GIB + 2 * GIB + t
    assert memory.estimate(_meta(6 * GIB, 6 * GIB), ref_pool=False).reference == memory.CTX + 6 * GIB + 2 * 6 * GIB
    assert memory.estimate(_meta(6 * GIB, 1000), ref_pool=False).reference == memory.CTX + 6 * GIB + 1000 + 64 * 1000  # T > O
    # a tiny input, a large output: the two outputs the determinism and near blindness checks compare, with T (2 O + T)
    assert memory.estimate(_meta(4096, GIB), ref_pool=False).reference == memory.CTX + 2 * GIB + t
    # the candidate: inputs, output, staging, poison's block and the digest's temporaries (I + 3 O + D), no copy of the
    # inputs; timed, the pool and a refresh, output and staging ((S + 1) I + 2 O)
    assert small.candidate == memory.CTX + GIB // 2 + 3 * GIB // 2 + d
    assert memory.estimate(_meta(GIB // 2, GIB // 2), timed=False).candidate == small.candidate
    assert memory.estimate(_meta(GIB, GIB // 8)).candidate == memory.CTX + 2 * GIB + 2 * GIB // 8  # timed: the pool and a refresh
    # a near case draws the set its changes come from before its own: one input set at a time (inputs.near_patch)
    assert memory.estimate(_meta(GIB, GIB // 8), timed=False).candidate == memory.CTX + GIB + 3 * GIB // 8 + d
    assert memory.estimate(_meta(10, 10, w=20 * GIB)).total > 40 * GIB  # the forward's own peak counts, in both children


def test_the_comparisons_temporaries_follow_the_largest_output():
    from kernelwright.judge import correctness

    def meta(*shapes, dtype="float32"):
        return {**_meta(GIB, GIB), "outputs": [{"shape": list(sh), "dtype": dtype} for sh in shapes]}

    # KernelBench's matmul: a 64 MiB output is compared in 32 chunks of 2**19 elements, 32 MiB of temporaries, not 256
    assert memory.compare_temp(meta((4096, 4096))) == 64 * 2**19 == 32 * 2**20
    assert memory.compare_temp(meta((8192, 16384))) == memory.COMPARE_TEMP == 64 * 2**22  # the cap
    assert memory.compare_temp(meta((10,))) == 64 * 2**16  # the floor
    assert [correctness.chunk_elements(n) for n in (10, 4096 * 4096, 8192 * 16384)] == [2**16, 2**19, 2**22]  # the same chunks
    assert memory.compare_temp(meta((10,), (4096, 4096))) == 64 * 2**19  # the largest output decides
    assert memory.compare_temp(meta((4096, 4096), dtype="complex64")) == 64 * 2**20  # real and imaginary parts
    assert memory.compare_temp(_meta(GIB, 1000)) == 64 * 1000  # no shapes: 64 bytes an output byte, at most COMPARE_TEMP


@pytest.mark.parametrize(("input_bytes", "slots"), [(0, 3), (1, 3), (GIB, 3), (4 * GIB // 3, 3), (4 * GIB // 3 + 1, 2),
                                                    (2 * GIB, 2), (2 * GIB + 1, 1), (16 * GIB, 1), (10**15, 1)])
def test_the_timing_pool_is_one_set_with_fresh_inputs_and_shrinks_without_them(input_bytes, slots):
    assert memory.pool_slots(input_bytes) == memory.pool_slots(input_bytes, fresh=True) == 1
    assert memory.pool_slots(input_bytes, fresh=False) == slots


def test_the_estimate_follows_the_pool(monkeypatch):
    # KernelBench level 1 problem 45's figures (the H200 at 73e2bba): 16 GiB in, 135 MiB out, forward peak 16.13 GiB
    i, o, w = 16 * GIB, 141705216, 17322475520
    x, t = w - i - o, min(memory.COMPARE_TEMP, 64 * 141705216)
    est = memory.estimate(_meta(i, o, w=w))
    # one pool set and its refresh (2 I): timed, the candidate holds more than in a correctness case (I + X + 3 O + D)
    assert est.candidate == memory.CTX + 2 * i + x + 2 * o
    assert memory.estimate(_meta(i, o, w=w), timed=False).candidate == memory.CTX + i + x + 3 * o + memory.DIGEST_TEMP + memory.SLAB_TEMP
    assert est.reference == memory.CTX + 2 * i + x + 2 * o + t
    assert est.total < 100 * GIB  # with baselines measured in the verdict it fits a 139.8 GiB H200 (it needed 162.37 GiB)
    # without fresh inputs (an ablation) the pool is the only variation: three sets while they fit in POOL_BYTES
    assert memory.estimate(_meta(GIB, GIB), fresh=False).candidate == memory.CTX + 4 * GIB + 2 * GIB
    assert memory.estimate(_meta(i, o, w=w), fresh=False) == est  # 16 GiB inputs: one set either way
    monkeypatch.setattr(memory, "POOL_BYTES", 1 << 50)
    old = memory.estimate(_meta(i, o, w=w), fresh=False)
    assert old.candidate == memory.CTX + 4 * i + x + 2 * o and old.reference == memory.CTX + 4 * i + x + 2 * o + t
    assert memory.estimate(_meta(i, o, w=w)) == est  # with fresh inputs POOL_BYTES plays no part


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
        with memory.admitted("cuda-9", 4 * GIB, total, say=no_wait) as waited:  # 8 of 10 GiB: within the share, no wait
            assert waited < 1.0  # at the first look (else no_wait raised); the ledger's own lock, loosely
    assert json.loads((ledger / "cuda-9.mem").read_text()) == {}  # every reservation went with its block


def test_a_verdict_alone_is_admitted_whatever_it_needs_and_dead_processes_hold_nothing(ledger):
    (ledger / "cuda-8.mem").write_text(json.dumps({"x": {"pid": 2**22 + 12345, "bytes": 9 * GIB}}))  # no such process
    with memory.admitted("cuda-8", 9 * GIB, 10 * GIB, say=no_wait) as waited:
        assert waited < 1.0  # at the first look (else no_wait raised); the ledger's own lock, loosely
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

    def call(self, command: str, args: dict, *, timeout_s: float, answers: list | None = None, found: list | None = None) -> dict:
        assert command == "memory" and not self.outstanding  # a pipelined reply is collected first
        return {"free_bytes": self.free, "total_bytes": 141 * GIB, "reserved_bytes": GIB}


def _oom_flow(free: int, outstanding: int = 0):
    from kernelwright.judge.evaluate import Flow
    from kernelwright.judge.verdicts import VerdictBuilder

    flow = Flow.__new__(Flow)
    flow.device, flow.policy = "cuda", Policy()
    flow.children = [_StubChild("candidate")]
    flow.ref = _StubChild("reference", free, outstanding)
    flow.estimate = memory.estimate(_meta(GIB, GIB))
    flow.vb = VerdictBuilder.__new__(VerdictBuilder)
    flow.vb.memory = {}
    return flow


def test_an_out_of_memory_is_the_candidates_when_the_device_had_room_for_it():
    from kernelwright.core.records import Status
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
    with memory.admitted("cuda-6", 6 * GIB, 10 * GIB, timeout_s=0.5, say=no_wait) as waited:
        assert waited < 1.0  # at the first look (else no_wait raised); the ledger's own lock, loosely
    (ledger / "cuda-6.mem").write_text("[not, json")
    with memory.admitted("cuda-6", 6 * GIB, 10 * GIB, timeout_s=0.5, say=no_wait) as waited:
        assert waited < 1.0  # at the first look (else no_wait raised); the ledger's own lock, loosely
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
    with memory.admitted("cuda-6", 6 * GIB, 10 * GIB, timeout_s=0.5, say=no_wait) as waited:  # its process gone, its lock went with it
        assert waited < 1.0  # at the first look (else no_wait raised); the ledger's own lock, loosely
    assert not list(ledger.glob("cuda-6.mem.*-*.held"))  # our own lock files go with their reservations
    with open(held) as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_timeout_inside_an_admitted_verdict_is_not_a_wait_for_memory(ledger, monkeypatch):
    from kernelwright.judge.channel import ChannelTimeout
    from kernelwright.judge.evaluate import Flow
    from kernelwright.judge.verdicts import VerdictBuilder

    monkeypatch.setenv(memory.FAKE_ENV, str(80 * GIB))
    flow = Flow.__new__(Flow)
    flow.device, flow.policy, flow.meta = "cpu", Policy(time_candidate=False), _meta(GIB, GIB)
    flow.vb = VerdictBuilder.__new__(VerdictBuilder)
    flow.say, flow.cancel = (lambda _m: None), None
    with pytest.raises(ChannelTimeout):
        with flow._admission():
            raise ChannelTimeout("a child's reply did not come")


@pytest.mark.parametrize(("input_bytes", "sets"), [(1 << 20, 1), (16 * GIB, 1)])
def test_kernelwright_baseline_times_with_the_pool_its_inputs_allow(monkeypatch, tmp_path, input_bytes, sets):
    """`kernelwright baseline` (judge.baseline.time_one) sizes the timing pool from the reference
    child's setup figures, as a verdict does; a stored record's timing key names the pool's rule."""
    from types import SimpleNamespace

    from kernelwright.judge import baseline, measure

    prob = SimpleNamespace(path=ROWSUM, name="rowsum", hash="h" * 16, source=ROWSUM.read_text())

    class FakeChild:
        closed = False

        def call(self, command, args, timeout_s=None, answers=None, found=None):
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
    assert json.loads(baseline.timing_key(Policy()))["pool"] == ["one set, refreshed in place", memory.POOL_BYTES]
    off = Policy(disabled_steps=frozenset({"fresh_inputs"}))
    assert json.loads(baseline.timing_key(off))["pool"] == [memory.POOL_SLOTS, memory.POOL_BYTES]
    # the flush's rule is in the key (records timed with the flush that also wrote an int64 copy of
    # its buffer, before 2026-12-04, do not match); with the flush off there is none to name
    assert json.loads(baseline.timing_key(Policy()))["flush"] == baseline.FLUSH_RULE
    assert "flush" not in json.loads(baseline.timing_key(Policy(disabled_steps=frozenset({"l2_flush"}))))
    got.clear()
    baseline.time_one(prob, "cpu", off, FakeChild(), tmp_path)
    assert got["pool_size"] == memory.pool_slots(input_bytes, fresh=False)


def test_the_estimates_comparison_temporaries_follow_the_comparisons_chunk():
    from kernelwright.judge import input_digest

    assert memory.DIGEST_TEMP == 16 * input_digest.DIGEST_WORDS  # the input check's int64 weights and, if the multiply copies them, words per chunk
    assert memory.SLAB_TEMP == input_digest.SLAB_BYTES  # and a strided input's slab
    small = memory.estimate(_meta(1000, 10 * GIB), timed=False).candidate  # one-byte inputs widen 16-fold, plus their slab
    assert small == memory.CTX + 1000 + 3 * 10 * GIB + 16 * 1000 + 1000


def test_a_refresh_keeps_each_tensor_and_lets_go_of_its_storage_before_drawing():
    """inputs.refresh_inputs: the pool's tensors keep their identity and take the fresh draw's
    values by taking its storage (set_), after letting go of their own first, so a refresh holds no
    second input set unless something else still holds the old storage (judge.memory); a tensor
    set_ cannot rebind (one that requires grad) gets the values copied in, as before."""
    import types

    import torch

    from kernelwright.judge import inputs
    from kernelwright.judge.inputs import Case

    n = [3]
    problem = types.ModuleType("kw_refresh_probe")
    problem.get_inputs = lambda: [torch.randn(64, 32), torch.randn(32, 16).t(), torch.randn(8, requires_grad=True), 7][:n[0] + 1]
    cpu = torch.device("cpu")
    pool = inputs.make_pool(problem, [1], cpu)
    x, xt, g = pool[0][:3]
    alias, g_alias = x.view(-1), g.detach()  # what a candidate could keep of the old storage
    old_x = x.clone()
    inputs.refresh_inputs(problem, pool[0], 7, cpu)
    want = inputs.raw_inputs(problem, Case("native", 7), cpu)
    assert pool[0][0] is x and pool[0][1] is xt and pool[0][2] is g and pool[0][3] == 7
    assert torch.equal(x, want[0]) and torch.equal(xt, want[1]) and xt.stride() == want[1].stride() and torch.equal(g, want[2])
    assert torch.equal(alias, old_x.view(-1))  # rebound, not written: the old storage kept its values for whoever held it
    assert torch.equal(g_alias, want[2])  # requires grad: copied in place
    n[0] = 1
    inputs.refresh_inputs(problem, pool[0], 8, cpu)
    assert len(pool[0]) == 2 and pool[0][0] is x and torch.equal(x, inputs.raw_inputs(problem, Case("native", 8), cpu)[0])


def test_the_profiled_call_takes_its_inputs_into_the_timing_pool(monkeypatch):
    """child_candidate.profile draws the call's inputs into the pool's first set (refresh_inputs)
    rather than a new set beside the pool: on the H200 the new set was the candidate child's peak
    in a timed verdict. The profiler is replaced by a stand-in (no GPU here); the call sees the
    pool's own tensor holding get_inputs() under the seed."""
    import contextlib
    import types

    import torch
    import torch.profiler

    from kernelwright.judge import child_candidate, inputs
    from kernelwright.judge.inputs import Case

    problem = types.ModuleType("kw_profile_probe")
    problem.get_inputs = lambda: [torch.randn(16, 8)]
    cpu = torch.device("cpu")
    pool = inputs.make_pool(problem, [3], cpu)
    x = pool[0][0]
    seen = []
    monkeypatch.setattr(child_candidate.S, "problem", problem)
    monkeypatch.setattr(child_candidate.S, "device", cpu)
    monkeypatch.setattr(child_candidate.S, "pool", pool)
    monkeypatch.setattr(child_candidate.S, "check_identities", False)
    monkeypatch.setattr(child_candidate, "_call", lambda values: seen.append(values))

    class Prof:
        def key_averages(self):
            return []

        def events(self):
            return []

    monkeypatch.setattr(torch.profiler, "profile", lambda **_k: contextlib.nullcontext(Prof()))
    got = child_candidate.profile({"input_seed": 11})
    assert got["profiler_ms"] == 0 and seen and seen[0] is pool[0] and seen[0][0] is x
    assert torch.equal(x, inputs.raw_inputs(problem, Case("native", 11), cpu)[0])
    monkeypatch.setattr(child_candidate.S, "pool", [])
    child_candidate.profile({"input_seed": 11})
    assert seen[1][0] is not x and torch.equal(seen[1][0], x)  # no pool (never timed): a set of its own


def test_a_refresh_leaves_an_inference_tensor_whole():
    """An input made under inference mode cannot be rebound (set_ refuses it): it is not emptied
    first, so a failed refresh cannot leave the pool holding an empty tensor (found in review)."""
    import types

    import torch

    from kernelwright.judge import inputs

    with torch.inference_mode():
        x = torch.randn(4, 4)
    problem = types.ModuleType("kw_inference_probe")
    problem.get_inputs = lambda: [torch.randn(4, 4)]
    entry = [x]
    try:
        inputs.refresh_inputs(problem, entry, 3, torch.device("cpu"))
    except RuntimeError:
        pass  # copying into an inference tensor outside inference mode fails, as it did before the rebinding
    assert entry[0].shape == (4, 4)


def test_a_near_case_has_the_values_it_had_and_holds_one_input_set_at_a_time():
    """inputs.make_inputs for a near case: the same tensors as drawing the case's set, then the
    other set, then copying the other set's values at the seed's positions (the way up to
    2026-12-04, written out here), while no tensor of one draw is alive when the next draw starts:
    the other set is drawn first and let go (judge.memory). Every value is compared bit for bit."""
    import types
    import weakref

    import torch

    from kernelwright.judge import inputs
    from kernelwright.judge.inputs import Case
    from kernelwright.judge.policy import NEAR_POSITIONS

    alive_at_draw: list[int] = []
    drawn: list[weakref.ref] = []

    def get_inputs():
        alive_at_draw.append(sum(r() is not None for r in drawn))
        big = torch.randn(1000)  # its 0-dim view below holds it (_base): a patch that kept the view would keep it
        out = [torch.randn(33, 7), torch.randint(0, 5, (9,)), torch.randn(6, 4, dtype=torch.float64).t(), 3.0, torch.randn(0), big[7]]
        drawn.extend(weakref.ref(t) for t in [*out, big] if isinstance(t, torch.Tensor))
        return out

    problem = types.ModuleType("kw_near_probe")
    problem.get_inputs = get_inputs
    cpu = torch.device("cpu")
    for seed in (1, 12345, 2**31 - 2):
        drawn.clear()
        alive_at_draw.clear()
        got = inputs.make_inputs(problem, Case("near", seed), cpu)
        assert alive_at_draw == [0, 0], alive_at_draw  # the other set was gone before the case's own was drawn
        want = inputs.raw_inputs(problem, Case("native", seed), cpu)
        other = inputs.raw_inputs(problem, Case("native", (seed * 2654435761 + 1) % (2**31 - 1) + 1), cpu)
        for i, t in enumerate(want):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0:
                gen = torch.Generator().manual_seed(seed * 7919 + i + 1)
                where = torch.unravel_index(torch.randint(t.numel(), (min(NEAR_POSITIONS, t.numel()),), generator=gen), t.shape)
                t[where] = other[i][where].to(t.dtype)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if isinstance(w, torch.Tensor):
                assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
                assert torch.equal(g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8))  # bit for bit
            else:
                assert g == w
        native = inputs.raw_inputs(problem, Case("native", seed), cpu)
        assert not torch.equal(got[0], native[0]) and not torch.equal(got[2], native[2])  # each floating input changed
        assert torch.equal(got[1], native[1])  # the integer one did not
        assert int((got[0] != native[0]).sum()) <= NEAR_POSITIONS


def test_the_judges_own_process_judges_without_importing_torch(tmp_path):
    """The parent of the children never needs torch: the memory estimate (admission included, on
    with a fake device size) and every other step of a verdict run without it. Importing it there
    cost a service's first verdict about 2.7 s on the H200 (memory.comparison_chunk). CPU backend,
    a correctness-only and a timed verdict, in a fresh process (this one has torch)."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from kernelwright.judge.evaluate import evaluate\n"
        "from kernelwright.judge.policy import Policy\n"
        "for timed in (False, True):\n"
        f"    v = evaluate(Path({str(ROWSUM)!r}), Path({str(FIX / 'candidates' / 'rowsum_correct')!r}), Policy(time_candidate=timed), device='cpu')\n"
        "    assert v.status.value == 'correct', v.log\n"
        "    assert v.memory and v.memory.get('estimate_bytes'), v.memory\n"
        "print('torch' in sys.modules)\n"
    )
    env = {**os.environ, "KERNELWRIGHT_DEVICE_BYTES": str(80 * GIB), "KERNELWRIGHT_LOCK_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout[-2000:]


def test_the_candidate_childs_near_case_holds_one_input_set_at_a_time(monkeypatch):
    """child_candidate.run_case for a near case, in this process on the CPU: it draws the other set
    before the case's own (inputs.near_patch), calls the candidate on the case's tensors, changes
    them and calls again; no draw starts while another draw's tensors are alive, and the second
    call sees the reference child's near inputs (inputs.make_inputs) bit for bit."""
    import types
    import weakref

    import torch

    from kernelwright.judge import child, child_candidate, inputs
    from kernelwright.judge.channel import close_fds
    from kernelwright.judge.inputs import Case

    alive_at_draw: list[int] = []
    drawn: list[weakref.ref] = []

    def get_inputs():
        alive_at_draw.append(sum(r() is not None for r in drawn))
        out = [torch.randn(40, 24), torch.randn(24)]
        drawn.extend(weakref.ref(t) for t in out)
        return out

    seen: list[torch.Tensor] = []

    class Model(torch.nn.Module):
        def forward(self, x, y):
            seen.append(x.clone())
            return x @ y

    problem = types.ModuleType("kw_near_child_probe")
    problem.get_inputs = get_inputs
    cpu = torch.device("cpu")
    for name, value in (("problem", problem), ("model", Model()), ("device", cpu), ("check_identities", False)):
        monkeypatch.setattr(child_candidate.S, name, value)
    seed = 4242
    try:
        reply = child_candidate.run_case({"case": Case("near", seed).to_dict(), "check_inputs": True, "check_flags": False, "poison": False})
    finally:
        close_fds(child.OUTBOX)
        child.OUTBOX.clear()
    assert "handover" in reply, reply
    assert alive_at_draw == [0, 0], alive_at_draw  # the other set, then the case's own: never both
    want = inputs.make_inputs(problem, Case("near", seed), cpu)
    native = inputs.raw_inputs(problem, Case("native", seed), cpu)
    assert len(seen) == 2 and torch.equal(seen[0], native[0]) and torch.equal(seen[1], want[0])
    assert not torch.equal(seen[1], native[0])


def test_a_ledger_locked_by_another_process_delays_admission_and_release_only_so_long(ledger, monkeypatch):
    """Candidate code can open the shared ledger and hold its flock: admission polls the lock up to
    its deadline and gives up, and a release neither hangs nor leaves a live entry behind. The hog
    lets go after 5 s whatever happens, so a blocking lock fails this test instead of hanging it."""
    monkeypatch.setattr(memory, "LEDGER_GRACE_S", 0.2)
    path = ledger / "cuda-5.mem"
    hog = None

    def let_go() -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(hog, fcntl.LOCK_UN)

    with memory.admitted("cuda-5", GIB, 10 * GIB, say=no_wait):
        hog = os.open(path, os.O_RDWR)
        fcntl.flock(hog, fcntl.LOCK_EX)  # another open file: a lock of its own, as another process's would be
        timer = threading.Timer(5, let_go)
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="stayed locked"):
            with memory.admitted("cuda-5", GIB, 10 * GIB, timeout_s=0):
                pass
        refused_s = time.monotonic() - t0
        t0 = time.monotonic()
    released_s = time.monotonic() - t0
    timer.cancel()
    let_go()
    os.close(hog)
    assert refused_s < 2 and released_s < 2  # each gave up after its 0.2 s, long before the hog let go
    with open(path) as f:
        assert memory._read(f, str(ledger)) == {}  # its lock file went: the entry left in the file is dead


def test_a_reservations_own_lock_file_taken_by_another_process_is_a_refusal_not_a_hang(ledger, monkeypatch):
    real = fcntl.flock

    def flock(fd, op):  # as if a watcher had locked the new .held file before this process could
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".held") and op & fcntl.LOCK_EX:
            if not op & fcntl.LOCK_NB:
                raise AssertionError("waited on its own lock file")
            raise BlockingIOError
        return real(fd, op)

    monkeypatch.setattr(memory.fcntl, "flock", flock)
    with pytest.raises(TimeoutError, match="own lock file"):
        with memory.admitted("cuda-4", GIB, 10 * GIB):
            pass
    assert not list(ledger.glob("cuda-4.mem.*.held"))  # nothing left behind


def test_step_precisions_float64_run_is_reserved_on_the_device_when_the_verdict_still_fits():
    """GPU run at bfea180: at the built-ins' full sizes the oracle (0.57-2.00 GiB) found no room in the
    reference child's reservation, so step precision did not run and fp16 inside went unrefused; the
    estimate now reserves it, unless the verdict would then not fit the device."""
    from kernelwright.judge.guards import precision
    from kernelwright.judge.policy import Policy

    meta = _meta(GIB, GIB)
    need = precision.device_oracle_bytes(Policy(), meta)
    assert need == precision.oracle_need(meta["memory"]) > 0
    assert precision.device_oracle_bytes(Policy(precision="tf32"), meta) == 0
    assert precision.device_oracle_bytes(Policy(disabled_steps=frozenset({"precision"})), meta) == 0
    plain, with_oracle = memory.estimate(meta), memory.estimate(meta, oracle=need, total=80 * GIB)
    assert with_oracle.candidate == plain.candidate and with_oracle.reference >= plain.reference
    room = with_oracle.reference - memory.CTX - meta["memory"]["param_bytes"]
    assert precision.placement(meta, room, cuda=True)[0] == "device"
    assert memory.estimate(meta, oracle=need, total=plain.total) == plain  # no room on the device: left out
