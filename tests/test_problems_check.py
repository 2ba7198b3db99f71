"""The degeneracy gate (`kernelwright problems check`): degenerate fixtures are flagged by the check
that names their trick, honest problems are not; real child processes, CPU."""

from __future__ import annotations

import json
import re

import pytest

from conftest import PROBLEMS, cli, problem

DEGENERATE = {  # fixture -> checks that must pass on its own get_inputs()
    "constant": {"constant_output", "input_independent", "another_seed_passes"},
    "zeros": {"all_zero_output", "zeros_pass", "constant_output"},
    "tiny": {"zeros_pass", "another_seed_passes"},
    "scaled_mean": {"another_seed_passes"},
    "two_outputs": {"all_zero_output", "zeros_pass"},  # output 1 only
}


@pytest.fixture(scope="module")
def report():
    res = cli("problems", "check", str(PROBLEMS / "degenerate"), str(problem("rowsum")), str(problem("outer")),
              str(problem("relu")), "--device", "cpu", "--json", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return {r["problem"]: r for r in json.loads(res.stdout)}


@pytest.mark.timeout(320)
@pytest.mark.parametrize("name", sorted(DEGENERATE))
def test_degenerate_problem_is_flagged_by_its_trick(report, name):
    r = report[name]
    native = {f["check"] for f in r["findings"] if f["native"]}
    if name == "two_outputs":
        assert {f["output"] for f in r["findings"] if f["native"]} == {1}, r["findings"]
    assert r["degenerate"] and DEGENERATE[name] <= native, r["findings"]
    assert "identity_passes" not in native  # the input is never the answer here


@pytest.mark.timeout(320)
@pytest.mark.parametrize("name", ["rowsum", "outer"])
def test_honest_problem_passes_the_gate(report, name):
    assert report[name]["degenerate"] is False and report[name]["findings"] == [], report[name]


@pytest.mark.timeout(320)
def test_relu_on_uniform_inputs_accepts_the_identity_but_the_judges_distributions_do_not(report):
    (finding,) = report["relu"]["findings"]
    assert finding["check"] == "identity_passes" and finding["native"] and not finding["distributions"], finding
    assert len(report["relu"]["cases"]) == 6  # 3 seeds of get_inputs() and 3 distributions


@pytest.mark.timeout(120)
def test_a_malformed_problem_exits_2_naming_the_file():
    res = cli("problems", "check", str(PROBLEMS / "malformed" / "get_inputs_raises.py"), "--device", "cpu")
    assert res.returncode == 2 and "get_inputs_raises.py" in res.stderr, (res.returncode, res.stderr[-2000:])


@pytest.mark.timeout(120)
def test_human_table_lists_every_problem():
    res = cli("problems", "check", str(problem("relu")), str(problem("rowsum")), "--device", "cpu")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "relu" in res.stdout and "rowsum" in res.stdout and "1 of 2 problem(s) degenerate" in res.stdout


SPARSE_PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, x):
        return {forward}

def get_inputs():
    i = torch.randint(0, 16, (2, 40))
    return [{first}, torch.randn(16, 4)]

def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("first, forward, said", [
    ("torch.sparse_coo_tensor(i, torch.randn(40), (16, 16)).coalesce()", "torch.sparse.mm(a, x)", "get_inputs() returned a tensor with layout torch.sparse_coo at position 0"),
    ("torch.randn(16, 16)", "(a @ x).to_sparse()", "the reference's forward returned a tensor with layout torch.sparse_coo at position 0"),
])
def test_a_problem_with_sparse_tensors_is_a_problem_error_that_says_so(tmp_path, first, forward, said):
    """The judge reads tensors' bytes in place (input check, poison, hand-over, comparison): a
    sparse input or output is refused as the problem's error, naming it, where it used to end as
    infra_error with the reference child's trace ("Cannot access storage of SparseTensorImpl")."""
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.policy import Policy
    from kernelwright.problems.loader import ProblemError

    problem = tmp_path / "sparse.py"
    problem.write_text(SPARSE_PROBLEM.format(first=first, forward=forward))
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "model_new.py").write_text("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, x):\n        return x\n")
    with pytest.raises(ProblemError, match=re.escape(said)):
        evaluate(problem, cand, Policy(time_candidate=False), device="cpu")
