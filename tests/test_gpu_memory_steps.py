"""The judge's memory-saving steps on a GPU, in process: poison fills the caching allocator's free
blocks in place and holds nothing itself, and the reference child keeps reference outputs in host
memory or recomputes them, never on the GPU (judge.memory). The CPU halves of both are in
tests/test_correctness_unit.py and tests/test_memory.py; a full verdict with poison catching a stale
output is the GPU zoo's `outer_stale_output`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import needs_gpu
from kernelwright.judge import child_reference, inputs
from kernelwright.judge.correctness import poison
from kernelwright.judge.inputs import Case

pytestmark = [needs_gpu(), pytest.mark.gpu]
FIX = Path(__file__).parent / "fixtures"
MIB = 1 << 20


def test_poison_fills_a_freed_block_in_place_and_holds_no_more_memory():
    dev = torch.device("cuda")
    answer = torch.full((64 * MIB,), 7, dtype=torch.uint8, device=dev)  # a stale answer, then freed into the cache
    del answer
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved()
    poison(dev, [64 * MIB])
    assert torch.cuda.memory_reserved() == reserved  # the freed block serves the output: nothing added
    out = torch.empty(64 * MIB, dtype=torch.uint8, device=dev)
    assert int(out.min()) == 0xFF and int(out.max()) == 0xFF
    del out
    small = torch.full((1000,), 3, dtype=torch.uint8, device=dev)  # the small pool
    del small
    poison(dev, [1000])
    out = torch.empty(1000, dtype=torch.uint8, device=dev)
    assert int(out.min()) == 0xFF
    bigger = 512 * MIB  # more than any free block holds: a new block, poisoned before it is handed out
    poison(dev, [bigger])
    out = torch.empty(bigger, dtype=torch.uint8, device=dev)
    assert int(out.min()) == 0xFF and int(out.max()) == 0xFF
    held = torch.ones(8, device=dev)  # a block in use is left alone
    poison(dev, [32])
    assert bool((held == 1).all())


def test_poison_covers_two_outputs_of_one_size_and_a_block_freed_on_another_stream():
    """Two outputs (or an intermediate and the output) of one size each find a poisoned block, even
    when only one such block was free; a block freed after record_stream on another stream, which
    the allocator settles only at its next allocation, is poisoned too (review of 73e2bba)."""
    dev, size = torch.device("cuda"), 48 * MIB
    answer = torch.full((size,), 7, dtype=torch.uint8, device=dev)
    del answer  # one free block of the size
    poison(dev, [size, size])
    first, second = torch.empty(size, dtype=torch.uint8, device=dev), torch.empty(size, dtype=torch.uint8, device=dev)
    assert int(first.min()) == 0xFF and int(second.min()) == 0xFF
    del first, second
    side = torch.cuda.Stream()
    answer = torch.full((size,), 7, dtype=torch.uint8, device=dev)
    with torch.cuda.stream(side):
        answer.add_(0)
    answer.record_stream(side)
    del answer  # pending until the allocator sees the side stream's work done
    poison(dev, [size])
    out = torch.empty(size, dtype=torch.uint8, device=dev)
    assert int(out.min()) == 0xFF and int(out.max()) == 0xFF


def test_reference_outputs_are_kept_on_the_host_or_recomputed(monkeypatch):
    problem = inputs.import_file(str(FIX / "problems" / "rowsum.py"), "kw_test_rowsum_gpu")
    S = child_reference.S
    monkeypatch.setattr(S, "device", torch.device("cuda"))
    monkeypatch.setattr(S, "problem", problem)
    monkeypatch.setattr(S, "model", problem.Model(*problem.get_init_inputs()).cuda())
    cases = [Case("native", 11), Case("normal", 12)]
    monkeypatch.setattr(child_reference, "HOST_COPY_BYTES_S", 1.0)  # a copy looks slower than any forward: recompute
    child_reference._compute_refs(cases)
    assert S.refs == [child_reference.RECOMPUTE] * 2
    recomputed = child_reference._case_refs(1)
    monkeypatch.setattr(child_reference, "HOST_COPY_BYTES_S", 1e30)  # a copy looks free: kept, in host memory
    child_reference._compute_refs(cases)
    assert all(r[0].device.type == "cpu" for r in S.refs)
    kept = child_reference._case_refs(1)
    assert kept[0].device.type == "cuda" and torch.equal(kept[0], recomputed[0])
    S.refs, S.cases = [], []  # nothing of this test's left in the module's state


def test_the_near_blindness_check_holds_one_forward_or_two_outputs_not_both(monkeypatch):
    """The near case's blindness check computes the answer on the unchanged inputs before it brings
    the near case's reference back, so it never holds that reference beside a whole forward
    (I + X + 2 O): kept in host memory, or recomputed while the answer waits in host memory, the
    peak is max(I + X + O, 2 O + T); a recomputed one too large to park still holds I + X + 2 O (the
    control that shows this test can see the difference). The verdict of the check is the same in
    all three."""
    problem = inputs.import_file(str(FIX / "problems" / "relu.py"), "kw_test_relu_near_gpu")
    monkeypatch.setattr(problem, "ROWS", 4096)
    monkeypatch.setattr(problem, "COLS", 4096)  # 64 MiB in, 64 MiB out, no working set
    S = child_reference.S
    for name, value in (("device", torch.device("cuda")), ("problem", problem), ("model", problem.Model().cuda()),
                        ("atol", 1e-4), ("rtol", 1e-4), ("tols", [(1e-4, 1e-4)])):
        monkeypatch.setattr(S, name, value)
    size = 64 * MIB
    peaks, blind = {}, {}
    for how, rate, park_s in (("kept", 1e30, child_reference.NEAR_PARK_S), ("parked", 1.0, 1e30), ("unparked", 1.0, 0.0)):
        monkeypatch.setattr(child_reference, "HOST_COPY_BYTES_S", rate)
        monkeypatch.setattr(child_reference, "NEAR_PARK_S", park_s)
        child_reference._compute_refs([Case("near", 21)])
        assert (S.refs[0] is child_reference.RECOMPUTE) == (how != "kept")
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        blind[how] = child_reference._near_is_blind(0)
        torch.cuda.synchronize()
        peaks[how] = torch.cuda.max_memory_allocated() - base
    from kernelwright.judge.memory import comparison_chunk

    t = 64 * comparison_chunk(size // 4)  # the comparison's temporaries (judge.memory's T): 32 MiB here
    assert peaks["kept"] <= 2 * size + t + MIB, peaks  # 2 O + T: the comparison, not a forward beside an output
    assert peaks["parked"] <= 2 * size + t + MIB, peaks
    assert peaks["unparked"] >= 3 * size, peaks
    assert blind == {"kept": False, "parked": False, "unparked": False}
    S.refs, S.cases = [], []


def test_a_reset_reference_child_holds_nothing_but_its_context(monkeypatch):
    """Between evaluations a warm reference child gives back its L2 flush buffer (twice the L2:
    120 MiB on the H200) and cuBLAS's workspace with its cached blocks: an idle warm child of one
    problem costs another verdict on the GPU its context only. Taken for an evaluation that times,
    it makes the flush buffer again before any candidate code runs. Each part is checked on its
    own, from a state this test makes (the pytest process may hold a flush buffer and workspaces
    from earlier tests)."""
    from kernelwright.judge import timing

    problem = inputs.import_file(str(FIX / "problems" / "rowsum.py"), "kw_test_rowsum_gpu_reset")
    S = child_reference.S
    for name, value in (("device", torch.device("cuda")), ("problem", problem), ("tainted", ""), ("flushes", True), ("model", None)):
        monkeypatch.setattr(S, name, value)
    monkeypatch.setattr(child_reference, "pin_flags", lambda _precision: None)  # the test process's own numerics flags stay as they are
    monkeypatch.setitem(timing._FLUSH, "buf", None)  # monkeypatch puts back whatever buffer the process had
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    flush_bytes = 2 * timing.l2_bytes()

    # the flush buffer
    before = torch.cuda.memory_reserved()
    timing.flush_l2()
    assert torch.cuda.memory_reserved() >= before + flush_bytes
    child_reference.reset({})
    assert timing._FLUSH.get("buf") is None and torch.cuda.memory_reserved() <= before

    # taken for an evaluation that times: the buffer is made again, before candidate code
    child_reference.reset({"init_seed": 1})
    got = timing._FLUSH.get("buf")
    assert got is not None and got.numel() == flush_bytes // 4
    monkeypatch.setattr(S, "flushes", False)
    child_reference.reset({"init_seed": 1})  # one that does not time leaves it unmade
    assert timing._FLUSH.get("buf") is None

    # cuBLAS's workspace, made on a stream of this test's own (a workspace is per stream)
    if getattr(torch._C, "_cuda_clearCublasWorkspaces", None) is None:
        pytest.skip("this torch cannot clear cuBLAS's workspaces (reset skips that part too)")
    child_reference.reset({})  # the model the last reset made goes first: only the workspace is measured below
    before = torch.cuda.memory_reserved()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        a = torch.randn(512, 512, device="cuda")
        (a @ a).sum().item()
        del a
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() > before  # the workspace outlives the matmul's tensors
    child_reference.reset({})
    assert torch.cuda.memory_reserved() <= before

    S.refs, S.pool = [], []


def test_the_l2_flush_reads_its_buffer_and_writes_no_copy_of_it():
    """timing.flush_l2 sums its int32 buffer as int32: a plain sum accumulates in int64, for which
    ATen first makes an int64 copy of the whole buffer (240 MiB on the H200, written and read back
    on every flush, and held in the child's cache)."""
    from kernelwright.judge import timing

    timing.flush_l2()  # the buffer made, if this process had none
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    timing.flush_l2()
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base < MIB


def test_the_free_memory_at_setup_is_read_before_the_problems_data_is_drawn(monkeypatch, tmp_path):
    """The verdict's memory.device_free_bytes_at_setup (and the too-large refusal's "free") is the
    device's free memory before the reference child draws the inputs: read after its forward, it
    was short by the problem's own inputs and outputs (an H100 at 34d7d68 named 62.02 GiB free of
    79.2 for KernelBench 45, whose 16 GiB input was the child's own)."""
    src = tmp_path / "big_relu.py"
    src.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                   "    def forward(self, x):\n        return torch.relu(x)\n\n\n"
                   "def get_inputs():\n    return [torch.randn(256, 1 << 20)]\n\n\n"  # 1 GiB of fp32 in, 1 GiB out
                   "def get_init_inputs():\n    return []\n")
    problem = inputs.import_file(str(src), "kw_test_big_relu_free")
    S = child_reference.S
    for name, value in (("device", torch.device("cuda")), ("problem", problem), ("model", problem.Model().cuda())):
        monkeypatch.setattr(S, name, value)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # no cached block the draw could take without the device seeing it
    free_before, _ = torch.cuda.mem_get_info()
    meta = child_reference._metadata(Case("native", 3))
    mem = meta["memory"]
    assert mem["input_bytes"] == 1 << 30 and mem["output_bytes"] == 1 << 30
    assert mem["device_free_bytes"] >= free_before - 512 * MIB  # not short by the 2 GiB this process drew (slack for another test process on the GPU)
    torch.cuda.empty_cache()
