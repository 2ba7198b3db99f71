"""Guard function_identities, dispatcher part: kernels registered for the operators the judge's own
code reaches in the candidate child, torch modes left on, dispatch keys switched on
(judge.watch.dispatch_moved). The zoo entries zoo_dispatch_kernel, zoo_dispatch_mode and
zoo_flush_sum judge whole candidates that try it."""

from __future__ import annotations

import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import needs_gpu
from kernelwright.judge import child, child_candidate, correctness, digest, input_digest, inputs, timing
from kernelwright.judge.channel import close_fds
from kernelwright.judge.watch import JUDGE_OPS, dispatch_moved, judge_overloads, snapshot_dispatch
from kernelwright.core.records import Case


class _Record(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.seen.add(func.name())  # with the overload: "aten::sub.Tensor"
        return func(*args, **(kwargs or {}))


@pytest.fixture(params=["native", "torch"])
def digest_path(request, monkeypatch):
    """The input check through the judge's digest kernel (judge.digest), or through the torch
    digest it falls back to when that kernel did not load."""
    if request.param == "native":
        assert digest.load("cpu") == "native", digest.load("cpu")
    else:
        monkeypatch.setattr(digest, "cpu_fn", None)
    return request.param


def _judges_steps(device: torch.device) -> None:
    """What the judge's code does in the candidate child, on small inputs."""
    problem = types.ModuleType("kw_problem_probe")
    problem.get_inputs = lambda: [torch.randn(8, 16), torch.randn(16)]
    problem.get_init_inputs = lambda: []
    for kind in ("native", "normal", "uniform", "large", "near"):
        values = inputs.make_inputs(problem, Case(kind, 5), device)
    before = inputs.input_record(values + [values[0][:, ::2], torch.tensor(1.5)])  # a strided slab, a 0-dim input
    inputs.changed_inputs(before, values + [values[0][:, ::2], torch.tensor(1.5)])
    pool = inputs.make_pool(problem, [1, 2], device)
    get = inputs.pool_getter(problem, pool, [[0, 3], [1, None]], device)
    get(0), get(1)
    correctness.poison(device, [64, 128], 0)
    child_candidate.S.device = device
    for out in (values[0][:2], (values[0], values[1]), values[0][:, ::2]):  # a view, a tuple, a non-contiguous view
        child_candidate._save(out)  # staged for the reference child (judge.handover)
    close_fds(child.OUTBOX)
    child.OUTBOX.clear()
    if device.type == "cuda":
        timing.flush_l2()
        torch.cuda.synchronize()


def _covered(device: torch.device) -> None:
    """Every operator the steps reach, after decomposition (a dispatch mode, with overloads) and
    at every level inside ATen (the legacy profiler, by name), is watched."""
    rec = _Record()
    with rec:
        _judges_steps(device)
    with torch.autograd.profiler_legacy.profile() as prof:
        _judges_steps(device)
    bases = {e.name.split("::", 1)[1] for e in prof.function_events if e.name.startswith("aten::")}
    assert rec.seen and rec.seen <= set(judge_overloads()), sorted(rec.seen - set(judge_overloads()))
    assert bases and bases <= set(JUDGE_OPS), sorted(bases - set(JUDGE_OPS))


def test_the_watched_operators_cover_what_the_judges_steps_reach_in_the_candidate_child(digest_path):
    _covered(torch.device("cpu"))
    live = {n.split("::", 1)[1].split(".")[0] for n in judge_overloads()}
    assert live == set(JUDGE_OPS)  # no name that watches nothing


@needs_gpu()
@pytest.mark.gpu
def test_the_watched_operators_cover_the_judges_steps_on_the_gpu():
    torch.cuda.init()
    _covered(torch.device("cuda"))


def test_a_kernel_registered_for_a_watched_overload_shows_and_goes_when_removed():
    snap = snapshot_dispatch()
    assert dispatch_moved(snap) == []
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("equal", lambda a, b: True, "CPU")
        lib.impl("sub.Tensor", lambda a, b, alpha=1: a, "CPU")  # not the default overload
        assert torch.equal(torch.zeros(2), torch.ones(2))  # the override is live in this process
        assert sorted(dispatch_moved(snap)) == ["aten::equal's dispatcher kernels", "aten::sub.Tensor's dispatcher kernels"]
    finally:
        lib._destroy()
    assert not torch.equal(torch.zeros(2), torch.ones(2))
    assert dispatch_moved(snap) == []


def test_a_kernel_for_an_operator_the_judge_does_not_reach_is_the_op_audits_not_this_guards():
    snap = snapshot_dispatch()
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("erfinv", lambda a: a, "CPU")
        assert "erfinv" not in JUDGE_OPS and dispatch_moved(snap) == []
    finally:
        lib._destroy()


def test_a_mode_left_on_or_the_python_dispatcher_switched_on_shows():
    from torch.overrides import TorchFunctionMode

    snap = snapshot_dispatch()
    mode = _Record()
    mode.__enter__()
    try:
        moved = dispatch_moved(snap)  # a dispatch mode also switches the Python keys on
        assert moved[0] == "the thread's dispatch modes (0 before the import, 1 now)", moved
        assert [m.split(" (")[0] for m in moved[1:]] == ["the thread's included keys"], moved
    finally:
        mode.__exit__(None, None, None)

    class _Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            return func(*args, **(kwargs or {}))

    fmode = _Passthrough()
    fmode.__enter__()
    try:
        assert dispatch_moved(snap) == ["the thread's function modes (0 before the import, 1 now)"]
    finally:
        fmode.__exit__(None, None, None)
    guard = torch._C._EnablePythonDispatcher()  # then py_impl kernels answer before the registered ones
    try:
        moved = dispatch_moved(snap)
        assert len(moved) == 1 and moved[0].startswith("the thread's included keys"), moved
    finally:
        del guard
    assert dispatch_moved(snap) == []


def test_a_mode_the_problem_left_on_before_the_snapshot_is_not_the_candidates():
    mode = _Record()
    mode.__enter__()
    try:
        snap = snapshot_dispatch()
        assert dispatch_moved(snap) == []
    finally:
        mode.__exit__(None, None, None)


def test_an_input_whose_class_was_swapped_counts_as_changed():
    class Agreeable(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
            if func is torch.equal:
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(4, 4)
    before = inputs.input_record([x])
    x.zero_()
    x.__class__ = Agreeable
    assert inputs.changed_inputs(before, [x]) == [0]


def test_a_default_device_set_at_import_counts_as_a_mode_left_on():
    """torch.set_default_device leaves torch's DeviceContext on the function mode stack; the judge's
    factory calls that name no device would follow it, so it is refused like any other mode."""
    snap = snapshot_dispatch()
    torch.set_default_device("cpu")
    try:
        assert dispatch_moved(snap) == ["the thread's function modes (0 before the import, 1 now)"]
    finally:
        torch.set_default_device(None)
    assert dispatch_moved(snap) == []


@pytest.mark.parametrize("make", [lambda: torch.tensor(1.5), lambda: torch.randn(1, 3).t(), lambda: torch.randn(5, 7, dtype=torch.float64)[:, ::2],
                                  lambda: torch.randn(2, 3, dtype=torch.complex64), lambda: torch.arange(10, dtype=torch.int64).reshape(2, 5).t(),
                                  lambda: torch.randn(3, 4, dtype=torch.complex64).conj(),
                                  lambda: torch.quantize_per_tensor(torch.randn(3, 5), 0.1, 0, torch.qint8),
                                  lambda: torch.randn(3, 4, dtype=torch.complex64).conj().imag],
                         ids=["0-dim", "size-1-last-dim-strided", "sliced", "complex", "int-transposed", "conjugate-bit", "quantized", "negative-bit"])
def test_the_input_check_takes_any_layout_and_sees_one_changed_element(make, monkeypatch, digest_path):
    """A 0-dim float input, or one whose size-1 last dimension has a stride other than 1, made the
    byte view fail and an honest candidate fail with it; every layout is digested, in chunks,
    blocks and slabs smaller than the tensor as well, and one element changed by its last bit
    is seen."""
    monkeypatch.setattr(input_digest, "DIGEST_WORDS", 4)
    monkeypatch.setattr(input_digest, "DIGEST_BLOCK", 2)
    monkeypatch.setattr(input_digest, "SLAB_BYTES", 8)
    x = make()
    before = inputs.input_record([x])
    assert inputs.changed_inputs(before, [x]) == [] and before["items"][0][-1][0] == digest_path
    if x.is_quantized:  # a byte view of one is no tensor (the child crashed on it in review): its stored integers are digested
        other = x.dequantize()
        other[-1, -1] += 0.5
        assert inputs.changed_inputs(before, [torch.quantize_per_tensor(other, 0.1, 0, torch.qint8)]) == [0]
        return
    x[tuple(n - 1 for n in x.shape)] += 1  # the last element, in place, whatever the layout (0-dim: the only one)
    assert inputs.changed_inputs(before, [x]) == [0]
    flat = x.detach().reshape(-1).clone()
    if not x.is_complex():
        bits = flat.view(torch.int16 if flat.element_size() >= 2 else torch.uint8)
        bits[0] ^= 1  # the lowest bit of the first element's first word
        x.copy_(flat.view(x.dtype).reshape(x.shape))
        assert inputs.changed_inputs(before, [x]) == [0]


def test_the_input_digest_is_keyed_exact_and_blind_to_nothing_it_should_see(monkeypatch, digest_path):
    """The digest behind step inputs_unchanged (judge.inputs): the same bytes under the same key
    agree, in whatever chunks they are read; a new key gives another digest (the weights are the
    key's); two changes that cancel under equal weights (a swap of equal and opposite amounts) are
    still seen; NaN payloads and -0.0 are bytes like any other; a stride or dtype change counts; an
    int64 value at its extremes does not wrap the sums."""
    x = torch.randn(3000)
    rec = inputs.input_record([x, 5])
    assert rec["items"][1] is None and inputs.changed_inputs(rec, [x, 6]) == []
    monkeypatch.setattr(input_digest, "DIGEST_WORDS", 100)  # many chunks (each its own weights) of several blocks, the last short
    monkeypatch.setattr(input_digest, "DIGEST_BLOCK", 7)
    rec = inputs.input_record([x, 5])
    assert inputs.changed_inputs(rec, [x.clone(), 5]) == []
    assert input_digest.keyed(x, rec["key"] + 1, 0) != rec["items"][0][-1]
    y = x.clone()
    y[10], y[2010] = y[10] + 0.5, y[2010] - 0.5
    assert inputs.changed_inputs(rec, [y, 5]) == [0]
    nan = torch.tensor([float("nan"), 0.0])
    rec = inputs.input_record([nan])
    other = nan.clone()
    other.view(torch.int32)[0] ^= 1  # another NaN
    assert inputs.changed_inputs(rec, [other]) == [0]
    assert inputs.changed_inputs(rec, [torch.tensor([float("nan"), -0.0])]) == [0]
    z = torch.randn(4, 6)
    rec = inputs.input_record([z])
    assert inputs.changed_inputs(rec, [z.t().contiguous().t()]) == [0]  # same values, other strides
    assert inputs.changed_inputs(rec, [z.view(torch.int32)]) == [0]  # same bytes, another dtype
    big = torch.tensor([2**63 - 1, -2**63] * 5000, dtype=torch.int64)
    rec = inputs.input_record([big])
    changed = big.clone()
    changed[9999] += 1  # -2**63 becomes -2**63 + 1
    assert inputs.changed_inputs(rec, [big]) == [] and inputs.changed_inputs(rec, [changed]) == [0]


def test_the_watch_sees_the_python_methods_the_input_digest_calls(monkeypatch):
    """The digest and the refresh call torch.Tensor methods and torch.Generator from Python; a
    floor_divide answering zeros, or a Generator that ignores its seed, would let a changed input
    pass without any dispatcher registration (found in review). Both are watched names now."""
    from kernelwright.judge.watch import identities_moved, snapshot_identities

    snap = snapshot_identities()
    assert identities_moved(snap) == []
    monkeypatch.setattr(torch.Tensor, "floor_divide", lambda self, other: torch.zeros_like(self))
    assert "torch.Tensor.floor_divide" in identities_moved(snap)
    monkeypatch.undo()

    class Fixed(torch.Generator):
        def manual_seed(self, seed):
            return super().manual_seed(1)

    monkeypatch.setattr(torch, "Generator", Fixed)
    assert "torch.Generator" in identities_moved(snap)
    monkeypatch.undo()
    assert identities_moved(snap) == []


def _torch_calls(fn) -> set[str]:
    """The torch functions and methods fn calls from Python (their C entry points, as sys.setprofile
    sees them), named as watch.WATCHED names them."""
    import sys

    names: set[str] = set()

    def prof(frame, event, arg):  # noqa: ANN001
        if event != "c_call":
            return
        owner, name = getattr(arg, "__self__", None), (getattr(arg, "__qualname__", None) or getattr(arg, "__name__", "")).split(".")[-1]
        if isinstance(owner, torch.Tensor):
            names.add(f"torch.Tensor.{name}")
        elif isinstance(owner, torch.Generator):
            names.add(f"torch.Generator.{name}")
        elif str(getattr(arg, "__qualname__", "")).startswith("_VariableFunctionsClass."):
            names.add(f"torch.{name}")

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return names


def test_every_torch_function_the_judges_steps_call_in_the_candidate_child_is_watched(digest_path):
    """The input check (step inputs_unchanged) runs in the candidate's process: a torch function it
    calls that the candidate replaced at import (a random_ that fills zeros, an empty that hands back
    a shared block) could make a changed input look unchanged. Every one it calls, on every layout,
    is a watched name: a new call in the digest that is not watched fails here (found in review,
    2026-12-04, after the digest's scratch block brought torch.empty and Tensor.random_ in)."""
    from kernelwright.judge.watch import WATCHED

    values = [torch.tensor(1.5), torch.randn(1, 3).t(), torch.randn(5, 7, dtype=torch.float64)[:, ::2], torch.randn(2, 3, dtype=torch.complex64),
              torch.randn(3, 4, dtype=torch.complex64).conj(), torch.randint(0, 9, (40,), dtype=torch.uint8), torch.randn(0),
              torch.quantize_per_tensor(torch.randn(3, 5), 0.1, 0, torch.qint8), 7]

    def check() -> None:
        record = inputs.input_record(values)
        assert inputs.changed_inputs(record, values) == []

    called = _torch_calls(check)
    seen = {"torch.Tensor.random_", "torch.empty", "torch.Tensor.mul_"} if digest_path == "torch" else {"torch.Tensor.data_ptr"}
    assert seen <= called  # the trace sees the digest's calls
    assert called <= set(WATCHED), sorted(called - set(WATCHED))
    # and every other step of the judge's in the candidate child (_judges_steps: inputs of every kind, the pool's
    # refresh, poison, saves)
    steps = _torch_calls(lambda: _judges_steps(torch.device("cpu")))
    assert {"torch.Tensor.set_", "torch.full", "torch.randint"} <= steps
    assert steps <= set(WATCHED), sorted(steps - set(WATCHED))


@pytest.mark.parametrize("words,block", [(5, 3), (8, 4), (1 << 20, 1 << 16)])
def test_the_input_digest_is_the_weighted_sum_it_documents(words, block, monkeypatch):
    """The digest is sum_j w_j x_j over the tensor's 16-bit words, each chunk's weights drawn from
    its own seed: recomputed here in Python integers, word by word, it is the same number."""
    monkeypatch.setattr(input_digest, "DIGEST_WORDS", words)
    monkeypatch.setattr(input_digest, "DIGEST_BLOCK", block)
    x = torch.randn(37, 11)
    key, index = 2**61 + 99, 3
    w16 = x.reshape(-1).view(torch.uint8).view(torch.int16).tolist()
    step, want = min(words, input_digest.DIGEST_WORDS_CPU), 0
    gen = torch.Generator()
    for chunk, start in enumerate(range(0, len(w16), step)):
        part = w16[start:start + step]
        gen.manual_seed((key + 1_000_003 * index + 7919 * chunk) % (1 << 63))
        weights = torch.empty(len(part), dtype=torch.int64).random_(1, 2**31, generator=gen).tolist()
        want += sum(w * v for w, v in zip(weights, part))
    assert input_digest.torch_digest(x, key, index) == want
