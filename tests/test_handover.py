"""Outputs handed over by descriptor (judge.handover) and descriptors on the result channel
(judge.channel), in process on the CPU: the staged bytes arrive unchanged, a memfd without its
seals or a description that lies about sizes is refused before anything is allocated for it, and
the channel refuses more descriptors than it allows."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

import pytest
import torch

from conftest import needs_gpu
from kernelwright.judge import channel, correctness, handover

CPU = torch.device("cpu")


def take(desc, items, fds, device):
    """The described outputs copied out of handover.taken's block, as the tests keep them."""
    with handover.taken(desc, items, fds, device) as outs:
        return [o.clone() if isinstance(o, torch.Tensor) else o for o in outs]


def _take(out):
    desc, fds = handover.Stager().stage(out, CPU)
    try:
        items = handover.items_of(desc)
        return desc, items, take(desc, items, fds, CPU)
    finally:
        channel.close_fds(fds)


def test_outputs_arrive_unchanged_through_a_sealed_memfd():
    a = torch.randn(5, 7)
    b = torch.arange(12, dtype=torch.int64).reshape(3, 4).t()  # non-contiguous
    c = torch.tensor([True, False, True])
    z = torch.randn(3, dtype=torch.complex64)
    desc, items, got = _take((a, b, c, z, torch.empty(0, 4)))
    assert desc["kind"] == "memfd"
    assert [i.offset % handover.ALIGN for i in items] == [0] * 5
    assert torch.equal(got[0], a) and torch.equal(got[1], b) and torch.equal(got[2], c) and torch.equal(got[3], z)
    assert got[4].shape == (0, 4)


def test_the_memfd_is_sealed_and_cannot_be_written():
    desc, fds = handover.Stager().stage(torch.ones(4), CPU)
    try:
        seals = fcntl.fcntl(fds[0], fcntl.F_GET_SEALS)
        assert seals & handover.SEALS == handover.SEALS
        with pytest.raises(PermissionError):
            os.pwrite(fds[0], b"\0" * 4, 0)
    finally:
        channel.close_fds(fds)


def test_an_unsealed_memfd_is_refused():
    desc, fds = handover.Stager().stage(torch.ones(4), CPU)
    fake = os.memfd_create("kw-output", os.MFD_ALLOW_SEALING)
    os.write(fake, os.pread(fds[0], 16, 0))
    try:
        items = handover.items_of(desc)
        with pytest.raises(handover.HandoverError, match="not sealed"):
            take(desc, items, [fake], CPU)
        r, w = os.pipe()  # not a memfd at all
        with pytest.raises(handover.HandoverError, match="not a sealable memfd"):
            take(desc, items, [r], CPU)
        channel.close_fds([r, w])
    finally:
        channel.close_fds(fds + [fake])


@pytest.mark.parametrize("change, match", [
    (lambda d: d["items"][0].update(nbytes=d["items"][0]["nbytes"] * 2), "do not add up"),
    (lambda d: d["items"][0].update(shape=[10**6]), "do not add up"),
    (lambda d: d["items"][0].update(offset=3), "malformed"),
    (lambda d: d["items"][0].update(dtype="object"), "malformed"),
    (lambda d: d.update(items="x"), "malformed"),
    (lambda d: d["items"][0].update(shape=[-1]), "malformed"),
])
def test_a_lying_description_is_refused(change, match):
    desc, fds = handover.Stager().stage(torch.ones(4), CPU)
    channel.close_fds(fds)
    change(desc)
    with pytest.raises(handover.HandoverError, match=match):
        handover.items_of(desc)


def test_a_memfd_smaller_than_described_is_refused():
    desc, fds = handover.Stager().stage(torch.ones(4), CPU)
    small = os.memfd_create("kw-output", os.MFD_ALLOW_SEALING)
    os.ftruncate(small, 8)
    fcntl.fcntl(small, fcntl.F_ADD_SEALS, handover.SEALS)
    try:
        with pytest.raises(handover.HandoverError, match="holds 8 bytes"):
            take(desc, handover.items_of(desc), [small], CPU)
    finally:
        channel.close_fds(fds + [small])


def test_types_shapes_and_dtypes_are_judged_from_the_description():
    ref = torch.zeros(4)

    class Sub(torch.Tensor):
        pass

    desc, items, got = _take((torch.ones(4).as_subclass(Sub), 3, torch.ones(2, 2), torch.ones(4, dtype=torch.float64)))
    assert correctness.check_described(ref, items[0], strict=True).startswith("output must be exactly torch.Tensor, got ")
    assert correctness.check_described(ref, items[0], strict=False) == ""
    assert torch.equal(got[0], torch.ones(4)) and type(got[0]) is torch.Tensor  # the data, as a plain tensor
    assert correctness.check_described(ref, items[1], strict=False) == "output is not a tensor: builtins.int"
    assert got[1] is items[1]
    assert "shape (2, 2) differs" in correctness.check_described(ref, items[2], strict=True)
    assert correctness.check_described(ref, items[2], strict=False) == ""
    assert "dtype torch.float64 differs" in correctness.check_described(ref, items[3], strict=True)


def test_nothing_staged_for_empty_outputs():
    desc, fds = handover.Stager().stage(torch.empty(0), CPU)
    assert desc["kind"] == "none" and fds == []
    assert take(desc, handover.items_of(desc), [], CPU)[0].numel() == 0


def test_descriptors_travel_on_the_result_channel():
    key = channel.new_key()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    writer, reader = channel.Writer(theirs.detach(), key), channel.Reader(ours.fileno(), key, sock=ours)
    r, w = os.pipe()
    writer.send({"ok": True, "fds": 1}, [r])
    writer.send({"ok": True})
    assert reader.recv(2.0) == {"ok": True, "fds": 1}
    [got] = reader.take_fds(1)
    os.write(w, b"x")
    assert os.read(got, 1) == b"x"  # the same pipe, through another descriptor
    assert reader.recv(2.0) == {"ok": True}
    with pytest.raises(channel.ChannelForged):
        reader.take_fds(1)  # a message may not claim descriptors that never came
    socket.send_fds(ours, [b"F"], [r])  # the judge's way to a child
    [back] = writer.recv_fds(1)
    channel.close_fds([r, w, got, back])
    ours.close()


def test_the_channel_refuses_a_flood_of_descriptors():
    key = channel.new_key()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    reader = channel.Reader(ours.fileno(), key, sock=ours)
    r, w = os.pipe()
    socket.send_fds(theirs, [b"{"], [r] * (channel.MAX_FDS + 2))  # more than one read may carry
    with pytest.raises(channel.ChannelForged, match="too many descriptors"):
        reader.recv(2.0)
    channel.close_fds([r, w])
    ours.close()
    theirs.close()


def test_chunked_comparison_matches_the_whole(monkeypatch):
    torch.manual_seed(0)
    ref = torch.randn(1000)
    out = ref.clone()
    out[[3, 500, 999]] += 1.0
    out[700] = float("nan")
    whole = correctness.compare(ref, out, 1e-4, 1e-4)
    monkeypatch.setattr(correctness, "CHUNK", 64)
    chunked = correctness.compare(ref, out, 1e-4, 1e-4)
    assert whole == chunked and chunked.n_bad == 4 and "[3]" in chunked.message and "1 NaN" in chunked.message
    ints = torch.tensor([2**60 + 1, 5] * 100, dtype=torch.int64)
    other = ints.clone()
    other[150] -= 1
    assert correctness.compare(ints, other, 0, 0).n_bad == 1  # exact in int64, past 2**53


STAGER_SCRIPT = r"""
import json, sys, torch
from kernelwright.judge import handover
x = torch.arange(1000, dtype=torch.float32, device="cuda").reshape(10, 100)
desc, fds = handover.Stager().stage((x, x.t(), torch.ones(3, dtype=torch.int64, device="cuda")), torch.device("cuda"))
print(json.dumps(desc), flush=True)
sys.stdin.readline()  # kept alive (and its staging area with it) until the taker is done
"""


@needs_gpu()
@pytest.mark.gpu
def test_outputs_cross_processes_as_a_cuda_ipc_handle():
    import json
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", STAGER_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        desc = json.loads(proc.stdout.readline())
        assert desc["kind"] == "cuda_ipc"
        items = handover.items_of(desc)
        got = take(desc, items, [], torch.device("cuda"))
        x = torch.arange(1000, dtype=torch.float32, device="cuda").reshape(10, 100)
        assert torch.equal(got[0], x) and torch.equal(got[1], x.t()) and torch.equal(got[2], torch.ones(3, dtype=torch.int64, device="cuda"))
        with handover.taken(desc, items, [], torch.device("cuda")) as views:  # read in place, as the reference child compares
            assert torch.equal(views[0], x) and torch.equal(views[1], x.t()) and views[0].data_ptr() != got[0].data_ptr()
            before = torch.cuda.memory_allocated()
            assert correctness.compare_outputs([x], [views[0]], 1e-4, 1e-4, True).ok
            del views
        assert torch.cuda.memory_allocated() == before  # the views owned nothing of this process's allocator
        lying = {**desc, "total": 1 << 30, "items": [dict(desc["items"][0], shape=[1 << 28], nbytes=1 << 30, offset=0)]}  # more than staged
        with pytest.raises(handover.HandoverError, match="holds"):
            take(lying, handover.items_of(lying), [], torch.device("cuda"))
    finally:
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=30)


class _Proc:
    pid = 2**22 + 54321  # no such process: kill() finds nothing

    def poll(self):
        return None

    def wait(self, timeout=None):
        return -9


def _child(role: str = "candidate"):
    """A Child whose process is this test: it writes the child's side of the channel itself, as a
    candidate that found its child's Writer could."""
    from kernelwright.judge.workers import Child, ChildConfig

    key = channel.new_key()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = Child.__new__(Child)
    child.config = ChildConfig(role=role, device="cpu", gpu_index=0, workdir=Path("/nonexistent"), env={})
    child.log_path = Path("/nonexistent/log")
    child._log_fd, child.env = os.open(os.devnull, os.O_RDONLY), {}
    child._proc, child._sock, child._closed = _Proc(), ours, False
    child._reader = channel.Reader(ours.fileno(), key, sock=ours)
    child.outstanding, child._received, child._watch = 1, [], None
    return child, channel.Writer(theirs.detach(), key)


def test_a_forged_reply_cannot_name_the_judges_descriptors():
    from kernelwright.judge.workers import ChildError

    child, writer = _child()
    writer.send({"ok": True, "result": {"handover": None, "_fds": [0, 1, 2]}})
    result = child.wait("run_case", timeout_s=2)
    assert child.received_fds() == []  # what the reply says is data; descriptors come only from the socket
    assert result["_fds"] == [0, 1, 2]
    for forged in (["a list"], {"ok": True, "result": [1, 2]}, {"ok": True, "result": 5}):
        child, writer = _child()
        writer.send(forged)
        with pytest.raises(ChildError) as exc:
            child.wait("run_case", timeout_s=2)
        assert exc.value.kind == "forged"


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_descriptors_no_reply_claims_are_forgery_and_claimed_ones_close_at_the_next_wait():
    from kernelwright.judge.workers import ChildError

    child, writer = _child()
    r, w = os.pipe()
    writer.send({"ok": True, "result": {}}, [r])  # carries a descriptor it does not claim
    with pytest.raises(ChildError) as exc:
        child.wait("run_case", timeout_s=2)
    assert exc.value.kind == "forged" and child._reader.unclaimed() == 0
    child, writer = _child()
    writer.send({"ok": True, "fds": 1, "result": {}}, [r])
    child.wait("run_case", timeout_s=2)
    [got] = child._received
    writer.send({"ok": True, "result": {}})
    child.outstanding = 1
    child.wait("check", timeout_s=2)  # the last reply's descriptor, never taken, is closed here
    assert _closed(got) and child.received_fds() == []
    channel.close_fds([r, w])


HUSH = """
import gc, signal
from kernelwright.judge import child
got = []
signal.signal(signal.SIGUSR1, lambda s, _f: got.append(s))
child.hush()
assert not gc.isenabled()
signal.raise_signal(signal.SIGUSR1)
assert got == [], got  # a candidate's handler does not run while an output is staged and taken
child.unhush()
assert got == [signal.SIGUSR1] and gc.isenabled(), got
print("ok")
"""


def test_hush_defers_signal_handlers_and_the_collector_until_the_next_command():
    import subprocess
    import sys

    # in a process of its own, on its main thread, as in a candidate child (signal handlers are the main thread's)
    proc = subprocess.run([sys.executable, "-c", HUSH], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_descriptions_must_follow_the_stagers_layout_and_complex_stays_complex():
    desc, fds = handover.Stager().stage((torch.ones(4), torch.ones(3)), CPU)
    channel.close_fds(fds)
    overlap = {**desc, "items": [dict(desc["items"][0]), {**desc["items"][1], "offset": 0}]}  # two outputs on one range
    with pytest.raises(handover.HandoverError, match="do not add up"):
        handover.items_of(overlap)
    with pytest.raises(handover.HandoverError, match="total"):
        handover.items_of({**desc, "total": desc["total"] * 1000})  # a mapping far past the outputs
    none = {**desc, "kind": "none"}
    with pytest.raises(handover.HandoverError, match="cannot be taken"):
        take(none, handover.items_of(none), [], CPU)
    assert correctness.check_described(torch.zeros(4, dtype=torch.bool), handover.Item("torch.Tensor", True, (4,), torch.float64, 0, 32), False) == ""
    assert "complex against real" in correctness.check_described(torch.zeros(4), handover.Item("torch.Tensor", True, (4,), torch.complex64, 0, 32), False)


def test_a_nan_in_the_reference_does_not_hide_the_worst_relative_error():
    ref = torch.tensor([float("nan"), 1.0, 1.0])
    out = torch.tensor([float("nan"), 1.0, 3.0])
    assert correctness.compare(ref, out, 1e-5, 1e-5).max_rel_error == pytest.approx(2.0)


@pytest.mark.parametrize("field, value", [("ops", [1]), ("ops", {"aten::add": "many"}), ("threads", "t"), ("threads", [1]),
                                          ("kernels", [["k", "1 ms"]]), ("activities", [["k", 1.0]]), ("profiler_ms", "x"),
                                          ("identities_moved", "torch.sum"), ("inputs_changed", ["0"]), ("handover", [])])
def test_a_candidate_reply_with_a_malformed_field_is_forged_not_a_crash_of_the_judge(field, value):
    from kernelwright.judge.workers import ChildError

    child, writer = _child()
    writer.send({"ok": True, "result": {"ops": {"aten::empty": 1}, "profiler_ms": 0.5, field: value}})
    with pytest.raises(ChildError) as exc:
        child.wait("audit", timeout_s=2)
    assert exc.value.kind == "forged" and repr(field) in str(exc.value)
    child, writer = _child()
    writer.send({"ok": True, "result": {"ops": {"aten::empty": 1}, "threads": [], "kernels": [["k", 0.1]],
                                        "activities": [["k", 0.1, 7]], "handover": None}})
    assert child.wait("audit", timeout_s=2)["ops"] == {"aten::empty": 1}  # well formed: read as it is


def test_a_failed_cuda_read_is_the_candidates_and_the_reference_child_is_not_reused(monkeypatch):
    """On CUDA the comparison reads the candidate's staging area in place (handover.taken): a CUDA
    error there is the candidate's output's doing (refused, and the reference child not reused);
    anything else, or any failure off CUDA IPC, is the judge's own (raised: infra_error)."""
    from kernelwright.judge import child_reference, reference_compare
    from kernelwright.judge.child import CommandError

    desc, fds = handover.Stager().stage(torch.ones(4), CPU)
    channel.close_fds(fds)
    monkeypatch.setattr(child_reference.S, "tainted", "")
    message = ["CUDA error: an illegal memory access was encountered"]

    def fails(*_a, **_k):
        raise RuntimeError(message[0])

    monkeypatch.setattr(handover, "taken", fails)
    with pytest.raises(RuntimeError):  # not CUDA IPC: a failure there is the judge's own (infra_error)
        reference_compare._compare_handover([torch.zeros(4)], {"handover": desc})
    message[0] = "a bug of the judge's"
    with pytest.raises(RuntimeError):  # CUDA IPC, but no CUDA error: the judge's own as well
        reference_compare._compare_handover([torch.zeros(4)], {"handover": {**desc, "kind": "cuda_ipc"}})
    assert child_reference.S.tainted == ""
    message[0] = "CUDA error: an illegal memory access was encountered"
    got = reference_compare._compare_handover([torch.zeros(4)], {"handover": {**desc, "kind": "cuda_ipc"}})
    assert not got["ok"] and "could not be read on the device" in got["message"] and child_reference.S.tainted
    with pytest.raises(CommandError, match="not reused"):
        child_reference.reset({})


def test_a_childs_memory_note_is_logged_at_debug_and_taken_off_its_reply(monkeypatch, caplog):
    """child.note_memory adds [reserved, peak since the last reply, staging, allocated, allocated
    peak, inactive split] in MiB to a CUDA child's reply and starts the next peak afresh; the judge's Child takes it off the reply and
    logs it (judge.workers.memory, debug), so which command sets a child's peak can be read from a
    service's log. A malformed one from a candidate is a forged reply like any other field."""
    import logging
    import sys
    from types import SimpleNamespace

    from kernelwright.judge import child as child_mod
    from kernelwright.judge import child_candidate
    from kernelwright.judge.workers import ChildError

    resets = []
    stats = {"reserved_bytes.all.current": 3 << 20, "reserved_bytes.all.peak": 5 << 20, "allocated_bytes.all.current": 2 << 20,
             "allocated_bytes.all.peak": 4 << 20, "inactive_split_bytes.all.current": 1 << 20}
    cuda = SimpleNamespace(is_initialized=lambda: True, memory_stats=lambda: stats, reset_peak_memory_stats=lambda: resets.append(1))
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(child_candidate.S.stager, "_size", 7 << 20)
    result = {"handover": None}
    child_mod.note_memory(result)
    monkeypatch.undo()
    assert result["memory_mib"] == [3, 5, 7, 2, 4, 1] and resets == [1]
    child, writer = _child()
    writer.send({"ok": True, "result": result})
    with caplog.at_level(logging.DEBUG, logger="kernelwright.judge.workers.memory"):
        got = child.wait("run_case", timeout_s=2)
    assert "memory_mib" not in got and "after 'run_case'" in caplog.text and "[3, 5, 7, 2, 4, 1]" in caplog.text
    child, writer = _child()
    writer.send({"ok": True, "result": {"memory_mib": "a lot"}})
    with pytest.raises(ChildError) as exc:
        child.wait("run_case", timeout_s=2)
    assert exc.value.kind == "forged"
    result = {}
    child_mod.note_memory(result)  # torch here is the CPU build: no CUDA, nothing added
    assert result == {}


def test_no_memory_note_rides_on_a_reply_that_hands_an_output_over(monkeypatch):
    """child.note_memory calls torch functions a candidate could replace: it is never called for a
    reply carrying a staged output, so nothing of the candidate's runs between the staging and the
    reference child's reading (found in review)."""
    from kernelwright.judge import child as child_mod

    calls = []
    monkeypatch.setattr(child_mod, "note_memory", lambda result: calls.append(result))

    class W:
        def send(self, msg, fds=None):
            pass

    monkeypatch.setattr(child_mod, "_send_outbox", lambda writer, msg: None)
    child_mod._answer(lambda a: {"handover": {"kind": "memfd"}}, {}, W())
    assert calls == []
    child_mod._answer(lambda a: {"handover": None}, {}, W())
    child_mod._answer(lambda a: {"warmup_calls": 3}, {}, W())
    assert len(calls) == 2


def test_nothing_the_candidate_set_on_its_output_runs_at_the_hand_over():
    """The hand-over calls torch's C base class with the tensor: an output object's own `detach`,
    `contiguous` or `reshape` (zoo_lazy_output computed its answer there, outside the timed call)
    is never called; a tuple subclass's __iter__ is not run (one value, not a tensor), and an
    object whose __class__ claims torch.Tensor is not taken for one."""
    ran = []
    out = torch.zeros(4)
    for name in ("detach", "contiguous", "reshape", "view", "cpu", "numel", "element_size", "to"):
        setattr(out, name, lambda *a, _n=name, **k: ran.append(_n) or torch.ones(4))
    _, items, got = _take(out)
    assert ran == [] and torch.equal(got[0], torch.zeros(4))

    class Lazy(tuple):
        def __iter__(self):
            ran.append("__iter__")
            return iter((torch.ones(4),))

    _, items, got = _take(Lazy((torch.zeros(4),)))
    assert ran == [] and len(items) == 1 and torch.equal(got[0], torch.zeros(4))  # its items as the base tuple holds them

    class Claims:
        __class__ = property(lambda self: torch.Tensor)

    fake = Claims()
    assert isinstance(fake, torch.Tensor)  # what isinstance alone would have believed
    _, items, _ = _take(fake)
    assert not items[0].is_tensor
