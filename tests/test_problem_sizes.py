"""Problem sizes (problems.sizes): every built-in problem's CPU size is small and really applied; the
CPU backend judges at it by default, the verdict says so, and --size full is honoured.

The built-in problems are the project's own code, so this test imports them in its process (the
judge never does: its children do)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from conftest import JUDGE_TIMEOUT_S, cli, correctness_policy
from kernelwright.judge import baseline
from kernelwright.judge.inputs import import_file
from kernelwright.judge.policy import Policy
from kernelwright.problems import sizes
from kernelwright.problems.loader import ProblemError
from kernelwright.problems.suite import load_suite

CPU_INPUT_LIMIT = 32 * 2**20  # bytes of inputs and weights at CPU size
FORWARD_LIMIT_S = 2.0  # one reference forward at CPU size on the 2-core CI box


def _bytes(values) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _full_input_bytes(path: Path) -> int:
    """get_inputs() at full size on the meta device: shapes only, no memory."""
    module = import_file(path, f"kw_full_{path.stem}")
    with torch.device("meta"):
        return _bytes(module.get_inputs())


BUILTIN = [e.problem for e in load_suite("builtin")]


def test_every_builtin_declares_a_cpu_size():
    missing = [p.name for p in BUILTIN if sizes.declared(p.source, str(p.path)) is None]
    assert not missing, f"built-in problems without CPU_SIZE: {missing}"
    assert len(BUILTIN) >= 89


def test_every_builtin_is_small_at_cpu_size_and_its_reference_runs_fast():
    """Each problem at CPU size: inputs and weights within 32 MB, a forward within 2 s, the extra
    shapes still accepted; and far smaller than its full size (an override that missed a
    dimension shows here)."""
    torch.manual_seed(0)
    slow, large, not_smaller = [], [], []
    for p in BUILTIN:
        module = import_file(p.path, f"kw_cpu_{p.name}", size="cpu")
        model = module.Model(*module.get_init_inputs()).eval()
        values = module.get_inputs()
        held = _bytes(values) + _bytes(list(model.parameters()) + list(model.buffers()))
        if held > CPU_INPUT_LIMIT:
            large.append(f"{p.name}: {held / 2**20:.1f} MiB")
        with torch.no_grad():
            t0 = time.perf_counter()
            model(*values)
            took = time.perf_counter() - t0
            for extra in getattr(module, "get_test_inputs", lambda: [])():
                model(*extra)
        if took > FORWARD_LIMIT_S:
            slow.append(f"{p.name}: {took:.2f} s")
        if _bytes(values) * 4 > _full_input_bytes(p.path):
            not_smaller.append(p.name)
    assert not large, f"over {CPU_INPUT_LIMIT >> 20} MiB at CPU size: {large}"
    assert not slow, f"a reference forward over {FORWARD_LIMIT_S} s at CPU size: {slow}"
    assert not not_smaller, f"CPU size not a quarter of the full inputs or less: {not_smaller}"


# -- the override mechanism ----------------------------------------------------------------------


def _module(tmp_path: Path, text: str, size: str = "cpu"):
    path = tmp_path / "p.py"
    path.write_text(text)
    return import_file(path, f"kw_sizes_{abs(hash(text))}", size=size)


def test_a_derived_constant_follows_its_override(tmp_path):
    text = "A, B = 64, 9\nC = D = 7\nAREA = A * B\nCPU_SIZE = {'A': 4, 'D': 3}\n"
    small = _module(tmp_path, text)
    assert (small.A, small.B, small.C, small.D, small.AREA) == (4, 9, 7, 3, 36)
    full = _module(tmp_path, text, size="full")
    assert (full.A, full.D, full.AREA) == (64, 7, 576)


def test_tracebacks_keep_the_file_line_numbers(tmp_path):
    with pytest.raises(ZeroDivisionError) as info:
        _module(tmp_path, "N = 8\nCPU_SIZE = {'N': 0}\n\nX = 1 / N\n")
    assert info.traceback[-1].lineno + 1 == 4


@pytest.mark.parametrize("text, says", [
    ("N = 8\nCPU_SIZE = {'M': 2}\n", "never assigns"),
    ("N = 8\nN = 16\nCPU_SIZE = {'N': 2}\n", "more than once"),
    ("N = 8\nN += 1\nCPU_SIZE = {'N': 2}\n", "more than once"),
    ("for N in range(3):\n    pass\nCPU_SIZE = {'N': 2}\n", "a plain assignment"),
    ("N = 8\nCPU_SIZE = dict(N=2)\n", "dict literal"),
    ("N = 8\nCPU_SIZE = {'N': 2 * 3 + len('x')}\n", "literal values"),
    ("N = 8\nCPU_SIZE = {}\n", "at least one"),
    ("N = 8\nCPU_SIZE = {'N': 2}\nglobals()['N'] = 8\n", "no longer hold"),
])
def test_an_override_is_never_ignored_silently(tmp_path, text, says):
    with pytest.raises(ProblemError, match=says):
        _module(tmp_path, text)


def test_resolve_picks_cpu_only_on_the_cpu_backend_and_refuses_cpu_without_a_declaration():
    declared, plain = "N = 8\nCPU_SIZE = {'N': 2}\n", "N = 8\n"
    assert sizes.resolve(declared, "auto", "cpu") == "cpu"
    assert sizes.resolve(declared, "auto", "cuda") == "full"
    assert sizes.resolve(declared, "full", "cpu") == "full"
    assert sizes.resolve(declared, "cpu", "cuda") == "cpu"
    assert sizes.resolve(plain, "auto", "cpu") == "full"
    with pytest.raises(ProblemError, match="declares no CPU_SIZE"):
        sizes.resolve(plain, "cpu", "cpu")


def test_a_cpu_size_baseline_never_stands_in_for_a_full_size_one():
    pol = Policy()
    assert baseline.timing_key(pol) == baseline.timing_key(pol, "full")  # records from before sizes still match
    assert baseline.timing_key(pol, "cpu") != baseline.timing_key(pol, "full")
    assert json.loads(baseline.timing_key(pol, "cpu"))["size"] == "cpu"


# -- through the judge ---------------------------------------------------------------------------

# The reference scales by SCALE; the candidate by 3, the CPU size's SCALE. Rows follow N, so a
# child that ran the other size would also disagree on the shape.
SIZED_PROBLEM = '''import torch
import torch.nn as nn

N, SCALE = 4096, 5
CPU_SIZE = {"N": 6, "SCALE": 3}


class Model(nn.Module):
    def forward(self, x):
        return x * SCALE


def get_inputs():
    return [torch.randn(N, 16)]


def get_init_inputs():
    return []
'''
CANDIDATE = '''import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        assert x.shape[1] == 16
        return x * 3
'''


@pytest.fixture(scope="module")
def sized(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sized")
    (root / "scaled.py").write_text(SIZED_PROBLEM)
    (root / "cand").mkdir()
    (root / "cand" / "model_new.py").write_text(CANDIDATE)
    return root / "scaled.py", root / "cand"


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_the_cpu_backend_judges_at_the_cpu_size_by_default_and_says_so(sized):
    from kernelwright.judge.evaluate import evaluate

    v = evaluate(sized[0], sized[1], correctness_policy(), device="cpu")
    assert v.status.value == "correct", v.log
    assert v.problem["size"] == "cpu" and v.policy["size"] == "auto"
    assert json.loads(v.to_json())["problem"]["size"] == "cpu"


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_size_full_is_honoured(sized):
    res = cli("eval", str(sized[0]), str(sized[1]), "--device", "cpu", "--correctness-only", "--baselines", "skip",
              "--no-compile-baseline", "--allow-torch-compute", "--size", "full", "--json", "--no-store")
    assert res.returncode == 0, res.stderr
    verdict = json.loads(res.stdout)
    assert verdict["problem"]["size"] == "full" and verdict["policy"]["size"] == "full"
    assert verdict["status"] == "incorrect"  # 5x, not the CPU size's 3x


def test_size_cpu_of_a_problem_without_one_exits_2(tmp_path):
    from conftest import candidate, problem

    res = cli("eval", str(problem("rowsum")), str(candidate("rowsum_correct")), "--device", "cpu", "--size", "cpu", "--no-store")
    assert res.returncode == 2 and "declares no CPU_SIZE" in res.stderr


# -- the sanitizer's and ncu's processes run the size the verdict used ---------------------------
# Their forwards need CUDA; what they import, and the size they are handed, are checked here.


def test_the_sanitizer_and_ncu_targets_import_the_problem_at_the_size_they_are_given(sized):
    from kernelwright.judge import sanitize_target

    problem, cand = sanitize_target.load([str(sized[0]), str(sized[1]), "cpu"])
    assert (problem.N, problem.SCALE) == (6, 3) and hasattr(cand, "ModelNew")
    problem, _ = sanitize_target.load([str(sized[0]), str(sized[1] / "model_new.py"), "full"])
    assert (problem.N, problem.SCALE) == (4096, 5)


def _refused_start(seen: list):
    def run_tool(cmd, **kwargs):
        seen.append(cmd)
        raise OSError("not started in this test")
    return run_tool


def test_the_sanitizer_and_ncu_commands_carry_the_size(sized, monkeypatch):
    from kernelwright.agent import profile
    from kernelwright.judge import sandbox, sanitize
    from kernelwright.problems.loader import load_problem

    seen: list = []
    monkeypatch.setattr(sandbox, "run_tool", _refused_start(seen))
    monkeypatch.setattr(sanitize, "find_tool", lambda: "/nowhere/compute-sanitizer")
    monkeypatch.setattr(profile, "find_ncu", lambda: "/nowhere/ncu")
    sanitize.run(sized[0], sized[1], gpu_index=0, env={}, timeout_s=1, tools=("memcheck",), size="cpu")
    profile.ncu_metrics(load_problem(sized[0]), sized[1], device="cuda", timeout_s=1, size="cpu")
    assert [cmd[-4:] for cmd in seen] == [["kernelwright.judge.sanitize_target", str(sized[0]), str(sized[1]), "cpu"],
                                          ["kernelwright.agent.profile", str(sized[0]), str(sized[1].resolve()), "cpu"]]


def test_the_judge_hands_the_sanitizer_the_verdicts_size(sized, monkeypatch):
    from types import SimpleNamespace

    from kernelwright.judge import finish, sanitize
    from kernelwright.core.records import Status
    from kernelwright.judge.verdicts import VerdictBuilder
    from kernelwright.problems.loader import load_problem

    asked: dict = {}
    monkeypatch.setattr(sanitize, "run", lambda *a, **kw: asked.update(kw) or {"ran": True, "tools": []})
    policy = Policy(size="cpu")
    vb = VerdictBuilder(load_problem(sized[0]), policy, "cuda")
    vb.size = "cpu"
    flow = SimpleNamespace(device="cuda", files=None, policy=policy, problem=vb.problem, candidate_path=sized[1], vb=vb)
    finish.with_sanitizer(flow, vb.finish(Status.CORRECT), lambda text: None)
    assert asked["size"] == "cpu"
