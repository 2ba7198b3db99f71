"""The input check's digest kernel (judge.digest): the number it documents, on every layout the
check meets; the torch fallback when it does not load; and function_identities' watch on the
bodies of the judge's functions (judge.watch._body), which the digest relies on like every step."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import needs_gpu
from kernelwright.judge import digest, input_digest, inputs, watch

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="module", autouse=True)
def native():
    assert digest.load("cpu") == "native", digest.load("cpu")


def _bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.uint8, torch.int8, torch.bool, torch.complex64])
@pytest.mark.parametrize("n", [1, 2, 3, 7, 4096, 4097, 9001])
def test_the_kernel_is_the_sum_it_documents(dtype, n):
    """Python integers, word by word (digest.reference), from an even and an odd first word: the
    kernel's tasks, its pairs and a last word without its partner all agree."""
    rng = random.Random(n)
    x = torch.rand(n) > 0.5 if dtype == torch.bool else (torch.randn(n) * 100).to(dtype)
    for first in (0, 1, 6, 4095):
        key = rng.getrandbits(64)
        assert digest.digest_slab(x, key, first) == digest.reference(_bytes(x), x.element_size() != 1, key, first), (first, key)


def test_a_strided_input_continues_the_word_count_across_its_slabs(monkeypatch):
    """A non-contiguous input is read a slab of its first dimension at a time (input_digest.slabs);
    its words are numbered on from slab to slab, so the digest is that of its bytes in row order."""
    monkeypatch.setattr(input_digest, "SLAB_BYTES", 24)  # slabs of one or two rows, an odd number of words each
    x = torch.randn(9, 14, dtype=torch.float16)[:, ::3]  # rows of 5 halves: 5 words a row
    kind, value = input_digest.keyed(x, 12345, 2)
    assert kind == "native"
    assert value == digest.reference(_bytes(x), True, 12345 + 1_000_003 * 2)


def test_every_change_to_one_word_is_seen_and_a_new_key_gives_a_new_digest():
    x = torch.randn(513)
    key = random.getrandbits(62)
    base = input_digest.keyed(x, key, 0)
    assert input_digest.keyed(x.clone(), key, 0) == base and input_digest.keyed(x, key + 1, 0) != base
    words = x.view(torch.int16)
    for j in (0, 1, 511, 1025):
        for bit in (0, 7, 15):
            y = words.clone()
            y[j] ^= 1 << bit if bit < 15 else -(1 << 15)
            assert input_digest.keyed(y.view(torch.float32), key, 0) != base, (j, bit)
    swapped = x.clone()
    swapped[[3, 4]] = swapped[[4, 3]]  # the same values, another order: weights differ by position
    assert x[3] == x[4] or input_digest.keyed(swapped, key, 0) != base


def test_without_the_kernel_the_torch_digest_answers_and_says_so(monkeypatch):
    monkeypatch.setattr(digest, "cpu_fn", None)
    monkeypatch.setattr(digest, "_WHY", {})
    monkeypatch.setenv("KERNELWRIGHT_DIGEST", "torch")
    assert digest.load("cpu") == "torch operators (KERNELWRIGHT_DIGEST=torch)"
    x = torch.randn(40)
    assert input_digest.keyed(x, 7, 1) == ("torch", input_digest.torch_digest(x, 7, 1))
    monkeypatch.delenv("KERNELWRIGHT_DIGEST")
    monkeypatch.setattr(digest, "_WHY", {})

    def no_compiler(*a, **k):
        raise RuntimeError("no g++ here")

    from kernelwright import runtime

    monkeypatch.setattr(runtime, "load", no_compiler)
    assert digest.load("cpu").startswith("torch operators (the judge's digest kernel did not load: RuntimeError: no g++ here")
    before = inputs.input_record([x])
    x[0] += 1
    assert inputs.changed_inputs(before, [x]) == [0]


def test_the_verdict_says_which_digest_checked_the_inputs(tmp_path):
    """Step inputs_unchanged's note names the fallback when the candidate child used it."""
    env = {**os.environ, "KERNELWRIGHT_DIGEST": "torch", "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-m", "kernelwright", "eval", str(FIXTURES / "problems" / "relu.py"),
                          str(FIXTURES / "candidates" / "relu_correct"), "--device", "cpu", "--correctness-only", "--json"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    import json

    v = json.loads(out.stdout)
    assert v["status"] == "correct", out.stderr[-2000:]
    note = next(s["reason"] for s in v["steps"] if s["name"] == "inputs_unchanged")
    assert note == "bitwise after every call; the digest by torch operators (KERNELWRIGHT_DIGEST=torch)"


def _watched_function(x, scale=2):  # noqa: ANN001 - a stand-in for a function of the judge's
    return x * scale


def test_function_identities_sees_a_new_body_in_the_same_function_object(monkeypatch):
    """Replacing a watched function's __code__, __defaults__ or a closure cell keeps the object
    (zoo_code_swap); the watch records them beside it."""
    monkeypatch.setattr(watch, "WATCHED", watch.WATCHED + ("test_digest._watched_function", "kernelwright.judge.input_digest.keyed"))
    snap = watch.snapshot_identities()
    assert watch.identities_moved(snap) == []
    fn = _watched_function

    def other(x, scale=2):  # noqa: ANN001
        return x

    code = fn.__code__
    fn.__code__ = other.__code__
    try:
        assert "test_digest._watched_function" in watch.identities_moved(snap)
    finally:
        fn.__code__ = code
    assert watch.identities_moved(snap) == []
    defaults = fn.__defaults__
    fn.__defaults__ = (0,)
    try:
        assert "test_digest._watched_function" in watch.identities_moved(snap)
    finally:
        fn.__defaults__ = defaults
    assert watch.identities_moved(snap) == []
    keyed = input_digest.keyed.__code__
    input_digest.keyed.__code__ = other.__code__
    try:
        assert "kernelwright.judge.input_digest.keyed" in watch.identities_moved(snap)
    finally:
        input_digest.keyed.__code__ = keyed


def test_a_closure_cell_changed_under_a_watched_function_is_seen(monkeypatch):
    def make():
        helper = abs

        def closed(x):  # noqa: ANN001
            return helper(x)
        return closed

    closed = make()
    module = type(sys)("kw_test_closure")
    module.closed = closed
    monkeypatch.setitem(sys.modules, "kw_test_closure", module)
    monkeypatch.setattr(watch, "WATCHED", watch.WATCHED + ("kw_test_closure.closed",))
    snap = watch.snapshot_identities()
    assert watch.identities_moved(snap) == []
    closed.__closure__[0].cell_contents = lambda x: 0
    assert "kw_test_closure.closed" in watch.identities_moved(snap)


def test_the_loaded_kernel_is_watched_by_name():
    snap = watch.snapshot_identities()
    assert snap["kernelwright.judge.digest.cpu_fn"][0] is digest.cpu_fn is not None
    saved = digest.cpu_fn
    digest.cpu_fn = lambda *a: 0
    try:
        assert "kernelwright.judge.digest.cpu_fn" in watch.identities_moved(snap)
    finally:
        digest.cpu_fn = saved


@needs_gpu()
@pytest.mark.gpu
@pytest.mark.parametrize("make", [lambda: torch.randn(4097), lambda: torch.randn(7, 33, dtype=torch.float16)[:, 1:],
                                  lambda: torch.randint(0, 255, (1001,), dtype=torch.uint8), lambda: torch.tensor(1.5),
                                  lambda: torch.randn(3, 5, dtype=torch.complex64).t(), lambda: torch.randn(1 << 22)],
                         ids=["fp32", "fp16-sliced", "bytes", "0-dim", "complex-strided", "16MiB"])
def test_the_cuda_kernel_gives_the_cpu_kernels_digest(make):
    """The same bytes digest to the same number on the H200 and on the host, from even and odd
    first words (the CUDA kernel's pairs, blocks and grid stride), and through input_digest.keyed's slabs."""
    assert digest.load("cuda") == "native", digest.load("cuda")
    x = make()
    g = x.cuda()
    for first in (0, 1, 12345):
        key = random.getrandbits(64)
        flat_cpu, flat_gpu = x.contiguous(), g.contiguous()
        assert digest.digest_slab(flat_gpu, key, first) == digest.digest_slab(flat_cpu, key, first), first
    assert input_digest.keyed(g, 99, 4) == input_digest.keyed(x, 99, 4)
    h = g.contiguous()
    before = inputs.input_record([h])
    assert inputs.changed_inputs(before, [h]) == []
    h.reshape(-1).view(torch.uint8)[-1] ^= 1  # one bit of the last byte
    assert inputs.changed_inputs(before, [h]) == [0]


def test_a_flipped_conjugate_or_negative_bit_counts_as_a_change():
    """The lazy bits change an input's values without changing a byte (found in review)."""
    z = torch.randn(6, dtype=torch.complex64)
    before = inputs.input_record([z])
    torch._C._set_conj(z, True)
    assert inputs.changed_inputs(before, [z]) == [0]
    y = torch.randn(3, 4, dtype=torch.complex64).conj().imag  # a negative-bit view
    before = inputs.input_record([y])
    assert inputs.changed_inputs(before, [y]) == []
    torch._C._set_neg(y, False)
    assert inputs.changed_inputs(before, [y]) == [0]


def test_an_input_objects_own_methods_are_not_the_checks():
    """A `detach` (or `stride`) set on the input object by the candidate is not what the check
    calls (zoo_input_detach handed it a copy made before clobbering the input)."""
    x = torch.randn(8)
    before = inputs.input_record([x])
    pristine = x.clone()
    x.mul_(2)
    x.detach = lambda *a, **k: pristine
    x.stride = lambda *a, **k: (1,)
    assert inputs.changed_inputs(before, [x]) == [0]


def test_names_added_to_a_judge_module_count_only_where_the_judges_code_reads_them(monkeypatch):
    """torch.compile adds `__compiled_fn_...` to the modules of frames it compiles and a warning
    adds `__warningregistry__`: the judge reads neither, so an honest candidate is not refused for
    them (found in review, 2026-12-04). A global under a builtin's name shadows it and counts, a
    callable module object posing as a submodule too."""
    import types

    snap = watch.snapshot_identities()
    monkeypatch.setattr(inputs, "__compiled_fn_0", lambda: 0, raising=False)
    monkeypatch.setattr(inputs, "__warningregistry__", {}, raising=False)
    assert watch.identities_moved(snap) == []
    monkeypatch.setattr(inputs, "zip", lambda *a: iter(()), raising=False)
    assert watch.identities_moved(snap) == ["kernelwright.judge.inputs.zip (added)"]

    class Callable(types.ModuleType):
        def __call__(self, *a):
            return iter(())

    fake = Callable("kernelwright.judge.inputs.zip")
    monkeypatch.setitem(sys.modules, "kernelwright.judge.inputs.zip", fake)
    monkeypatch.setattr(inputs, "zip", fake, raising=False)
    assert watch.identities_moved(snap) == ["kernelwright.judge.inputs.zip (added)"]


def test_the_timing_pools_refresh_runs_nothing_of_a_tensor_whose_class_was_swapped():
    """Between timed calls the pool's tensors are refreshed in place; one whose class the candidate
    swapped for a subclass with __torch_function__ is replaced, never written through (its
    copy_ computed the next answer outside the timed region: found in review, 2026-12-04)."""
    import types

    ran = []

    class Sub(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types_, args=(), kwargs=None):  # noqa: ANN001
            ran.append(getattr(func, "__name__", str(func)))
            return super().__torch_function__(func, types_, args, kwargs or {})

    problem = types.ModuleType("kw_problem_refresh")
    problem.get_inputs = lambda: [torch.randn(4, 5)]
    pool = inputs.make_pool(problem, [1], torch.device("cpu"))
    x = pool[0][0]
    x.__class__ = Sub
    ran.clear()
    inputs.refresh_inputs(problem, pool[0], 7, torch.device("cpu"))
    assert ran == [] and type(pool[0][0]) is torch.Tensor and pool[0][0] is not x
    assert torch.equal(pool[0][0], inputs.raw_inputs(problem, inputs.Case("native", 7), torch.device("cpu"))[0])


def test_the_judges_draw_of_inputs_runs_nothing_of_a_mode_left_on_or_a_replaced_seed():
    """Between timed calls the judge draws the next inputs in the candidate child: a torch function
    or dispatch mode the candidate left on does not see that draw, and random.seed (seeded before
    every draw) and the problem's own get_inputs are watched names (a red-team review computed the
    next answer in each, outside the timed region, 2026-12-04)."""
    import types

    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Fn(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):  # noqa: ANN001
            seen.append("function")
            return func(*args, **(kwargs or {}))

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):  # noqa: ANN001
            seen.append("dispatch")
            return func(*args, **(kwargs or {}))

    problem = types.ModuleType("kw_problem_modes")
    problem.get_inputs = lambda: [torch.randn(4, 5)]
    fn, dispatch, cpu, case = Fn(), Dispatch(), torch.device("cpu"), inputs.Case("native", 3)
    fn.__enter__()
    dispatch.__enter__()
    try:
        got = inputs.raw_inputs(problem, case, cpu)
    finally:
        dispatch.__exit__(None, None, None)
        fn.__exit__(None, None, None)
    assert seen == [] and torch._C._len_torch_function_stack() == 0
    assert torch.equal(got[0], inputs.raw_inputs(problem, inputs.Case("native", 3), torch.device("cpu"))[0])
    assert {"random.seed", "numpy.random.seed"} <= set(watch.WATCHED_EXTRA)


def test_the_problem_modules_functions_and_namespace_are_watched(monkeypatch):
    import types

    module = types.ModuleType("kw_problem")
    exec("import torch\nROWS = 4\ndef get_inputs():\n    return [torch.randn(ROWS, 3)]\n", module.__dict__)
    module.get_inputs.__module__ = "kw_problem"
    monkeypatch.setitem(sys.modules, "kw_problem", module)
    snap = watch.snapshot_identities()
    assert "kw_problem.get_inputs" in snap and watch.identities_moved(snap) == []
    original = module.get_inputs
    module.get_inputs = lambda: original()
    assert "kw_problem.get_inputs" in watch.identities_moved(snap)
    module.get_inputs = original
    module.ROWS = 5
    assert "kw_problem.ROWS" in watch.identities_moved(snap)


def test_every_watched_name_of_the_judges_own_is_found_where_the_list_says():
    """A watched name that no longer resolves (a function moved to another module, the list not
    updated) is watched as missing, and replacing the function would go unseen: each of the
    package's own names in WATCHED is found in a candidate child's modules, but the CUDA driver's
    entries, which are bound only on CUDA (handover._cuda)."""
    from kernelwright.judge import child_candidate  # noqa: F401 - what a candidate child has loaded

    own = [n for n in watch.WATCHED if n.startswith("kernelwright.") and not n.startswith("kernelwright.judge.handover._driver.")]
    assert not [n for n in own if watch._paths(n, load=True)[0] is watch._MISSING]
