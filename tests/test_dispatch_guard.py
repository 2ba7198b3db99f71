"""Guard function_identities, dispatcher part: kernels registered for the operators the judge's own
code runs in the candidate child, and torch modes left on (judge.child.dispatch_moved). The zoo
entries zoo_dispatch_kernel and zoo_dispatch_mode judge whole candidates that try it."""

from __future__ import annotations

import os
import tempfile
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelwright.judge import child_candidate, correctness, inputs
from kernelwright.judge.child import JUDGE_OPS, dispatch_moved, snapshot_dispatch
from kernelwright.judge.records import Case


class _Record(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.seen.add(func._schema.name)
        return func(*args, **(kwargs or {}))


def test_the_watched_operators_cover_what_the_judges_steps_run_in_the_candidate_child():
    problem = types.ModuleType("kw_problem_probe")
    problem.get_inputs = lambda: [torch.randn(8, 16), torch.randn(16)]
    problem.get_init_inputs = lambda: []
    cpu = torch.device("cpu")
    rec = _Record()
    with rec:
        for kind in ("native", "normal", "uniform", "large", "near"):
            values = inputs.make_inputs(problem, Case(kind, 5), cpu)
        before = inputs.clone_tensors(values)
        inputs.changed_inputs(before, values)
        pool = inputs.make_pool(problem, [1, 2], cpu)
        get = inputs.pool_getter(problem, pool, [[0, 3], [1, None]], cpu)
        get(0), get(1)
        correctness.poison(cpu, [64, 128], 0)
        folder = tempfile.mkdtemp()
        child_candidate._save(values[0][:2], os.path.join(folder, "a.pt"))  # a view of a larger storage: cloned first
        child_candidate._save((values[0], values[1]), os.path.join(folder, "b.pt"))
    assert rec.seen and rec.seen <= set(JUDGE_OPS), sorted(rec.seen - set(JUDGE_OPS))


def test_a_kernel_registered_for_a_watched_operator_shows_and_goes_when_removed():
    snap = snapshot_dispatch()
    assert dispatch_moved(snap) == []
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("equal", lambda a, b: True, "CPU")
        assert torch.equal(torch.zeros(2), torch.ones(2))  # the override is live in this process
        assert dispatch_moved(snap) == ["aten::equal's dispatcher kernels"]
    finally:
        lib._destroy()
    assert not torch.equal(torch.zeros(2), torch.ones(2))
    assert dispatch_moved(snap) == []


def test_a_kernel_for_an_operator_the_judge_does_not_run_is_the_op_audits_not_this_guards():
    snap = snapshot_dispatch()
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("erfinv", lambda a: a, "CPU")
        assert "aten::erfinv" not in JUDGE_OPS and dispatch_moved(snap) == []
    finally:
        lib._destroy()


def test_a_dispatch_or_function_mode_left_on_shows():
    from torch.overrides import TorchFunctionMode

    snap = snapshot_dispatch()
    mode = _Record()
    mode.__enter__()
    try:
        assert dispatch_moved(snap) == ["the torch dispatch mode stack (1 mode left on)"]
    finally:
        mode.__exit__(None, None, None)

    class _Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            return func(*args, **(kwargs or {}))

    fmode = _Passthrough()
    fmode.__enter__()
    try:
        assert dispatch_moved(snap) == ["the torch function mode stack (1 mode left on)"]
    finally:
        fmode.__exit__(None, None, None)
    assert dispatch_moved(snap) == []
