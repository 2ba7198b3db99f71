"""Triton candidates on the GPU (issue 31): compiled by Triton in the sandboxed candidate child,
judged correct, and their kernels' time attributed to the candidate by the provenance step; and
KernelBench's Triton-backend candidates (tests/fixtures/kernelbench_triton) judged as they are,
under KernelBench's settings. CPU-side Triton tests: tests/test_triton_cpu.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CANDIDATES, PROBLEMS, needs_gpu, timing_policy

pytest.importorskip("triton", reason="Triton is not installed: pip install -e '.[test]'")
pytestmark = [pytest.mark.gpu, needs_gpu(), pytest.mark.timeout(600)]

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _provenance(v) -> str:
    return next(s.reason for s in v.steps if s.name == "kernel_provenance")


@pytest.mark.parametrize("problem,candidate,kernel", [("relu", "relu_triton", "kw_relu_kernel"),
                                                      ("matmul", "zoo_triton_matmul_ieee", "kw_matmul_kernel")])
def test_a_triton_candidate_is_correct_with_its_kernels_attributed_to_it(problem, candidate, kernel):
    from kernelwright.core.records import Status
    from kernelwright.judge.evaluate import evaluate

    v = evaluate(PROBLEMS / f"{problem}.py", CANDIDATES / candidate, timing_policy(allow_torch_compute=False), device="cuda")
    assert v.status is Status.CORRECT, v.log
    reason = _provenance(v)
    assert "candidate 100.0 %" in reason and kernel in reason, reason


def test_kernelbench_triton_backend_candidates_are_judged_as_they_are(tmp_path):
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.policy import kernelbench_preset
    from kernelwright.problems.suite import load_suite

    rows = {}
    for entry in load_suite(f"kernelbench:{FIXTURES / 'kernelbench'}"):
        level = f"level{entry.level}"
        src = FIXTURES / "kernelbench_triton" / level / f"{entry.problem.name}.py"
        cand = tmp_path / entry.problem.name
        cand.mkdir()
        (cand / "model_new.py").write_text(src.read_text())
        v = evaluate(entry.problem.path, cand, kernelbench_preset(compile_baseline=False, allow_torch_compute=False), device="cuda")
        rows[entry.problem.name] = (v.status.value, _provenance(v) if v.status.value == "correct" else v.log)
    assert all(s == "correct" and "candidate 100.0 %" in why for s, why in rows.values()), rows
