"""Problem loading: static checks (load_problem / load_problems), the reference child's checks
through evaluate(), and the CLI's exit code for a malformed problem."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from conftest import JUDGE_TIMEOUT_S, PROBLEMS, candidate, cli, correctness_policy, problem
from kernelwright.judge.evaluate import evaluate
from kernelwright.problems.loader import Problem, ProblemError, load_problem, load_problems

MALFORMED = PROBLEMS / "malformed"


# -- static loading ----------------------------------------------------------------------------


def test_load_good_problem():
    p = load_problem(problem("rowsum"))
    assert isinstance(p, Problem)
    assert p.name == "rowsum" and p.path == problem("rowsum").resolve()
    assert p.hash == hashlib.sha256(p.source.encode()).hexdigest()
    assert p.to_dict() == {"name": "rowsum", "hash": p.hash}


def test_missing_get_inputs_names_the_file():
    path = MALFORMED / "no_get_inputs.py"
    with pytest.raises(ProblemError) as info:
        load_problem(path)
    msg = str(info.value)
    assert str(path.resolve()) in msg and "missing get_inputs" in msg


def test_syntax_error_names_file_and_line():
    path = MALFORMED / "syntax_error.py"
    with pytest.raises(ProblemError) as info:
        load_problem(path)
    msg = str(info.value)
    assert str(path.resolve()) in msg and "syntax error at line" in msg


@pytest.mark.parametrize("spec, cause", [
    ("no/such/file.py", "no such problem file"),
    ("builtin:no_such_builtin_problem", "no such built-in problem"),
    ("kernelbench:/no/such/checkout:1:1", "no such folder"),
])
def test_unloadable_specs(spec, cause):
    with pytest.raises(ProblemError, match=cause):
        load_problem(spec)


def test_not_a_py_file(tmp_path):
    path = tmp_path / "problem.txt"
    path.write_text("class Model: pass\n")
    with pytest.raises(ProblemError, match="a problem is a .py file"):
        load_problem(path)


def test_folder_loading_sorted_and_skipping_private_files(tmp_path):
    shutil.copy(problem("rowsum"), tmp_path / "rowsum.py")
    shutil.copy(problem("relu"), tmp_path / "relu.py")
    (tmp_path / "_helpers.py").write_text("x = 1\n")  # skipped: starts with _
    (tmp_path / "notes.txt").write_text("not a problem\n")
    loaded = load_problems(tmp_path)
    assert [p.name for p in loaded] == ["relu", "rowsum"]
    assert load_problems(tmp_path / "rowsum.py")[0].name == "rowsum"


def test_empty_folder_is_an_error(tmp_path):
    with pytest.raises(ProblemError, match="no problem files"):
        load_problems(tmp_path)


def test_folder_with_one_malformed_file_is_an_error(tmp_path):
    shutil.copy(problem("rowsum"), tmp_path / "rowsum.py")
    shutil.copy(MALFORMED / "no_get_inputs.py", tmp_path / "broken.py")
    with pytest.raises(ProblemError, match="broken.py"):
        load_problems(tmp_path)


def test_problem_named_problem_py_takes_its_folder_name(tmp_path):
    folder = tmp_path / "softmax"
    folder.mkdir()
    shutil.copy(problem("relu"), folder / "problem.py")
    assert load_problem(folder / "problem.py").name == "softmax"


# -- checks that need the problem's code to run (reference child) ------------------------------


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_get_inputs_raising_is_a_problem_error_naming_file_and_cause():
    path = MALFORMED / "get_inputs_raises.py"
    with pytest.raises(ProblemError) as info:
        evaluate(path, candidate("rowsum_correct"), correctness_policy(), device="cpu")
    msg = str(info.value)
    assert "get_inputs_raises.py" in msg
    assert "get_inputs() failed" in msg and "the input file is missing" in msg


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
@pytest.mark.parametrize("name", ["nondeterministic_random", "nondeterministic_numpy"])
def test_nondeterministic_reference_is_a_problem_error(name):
    with pytest.raises(ProblemError) as info:
        evaluate(MALFORMED / f"{name}.py", candidate("rowsum_correct"), correctness_policy(), device="cpu")
    msg = str(info.value)
    assert f"{name}.py" in msg and "deterministic" in msg


# -- the CLI -----------------------------------------------------------------------------------


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_cli_malformed_problem_exits_2_with_the_message_on_stderr():
    path = MALFORMED / "no_get_inputs.py"
    res = cli("eval", str(path), str(candidate("rowsum_correct")), "--device", "cpu", "--correctness-only", "--no-store")
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())  # rich may wrap long lines
    assert "malformed problem" in err and "no_get_inputs.py" in err and "get_inputs" in err
    assert res.stdout == ""



NUMPY_INPUTS_PROBLEM = """
import random

import numpy as np
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    scale = random.uniform(0.5, 2.0)
    return [torch.from_numpy((np.random.rand(128, 1024) - 0.5).astype("float32")) * scale]


def get_init_inputs():
    return []
"""


@pytest.mark.timeout(120)
def test_inputs_drawn_from_python_and_numpy_generators_are_seeded(tmp_path):
    """get_inputs() may use random and numpy's global generator: the judge seeds them in every child,
    so the reference is deterministic and both children see the same inputs."""
    from kernelwright.core.records import Status

    path = tmp_path / "relu_numpy.py"
    path.write_text(NUMPY_INPUTS_PROBLEM)
    v = evaluate(path, candidate("relu_correct"), correctness_policy(), device="cpu")
    assert v.status is Status.CORRECT, v.log
