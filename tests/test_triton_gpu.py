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


def test_triton_compiles_and_autotuning_are_timed_apart_and_cached_by_content(tmp_path):
    """The first verdict of an autotuned Triton candidate compiles and benchmarks its configurations
    in the candidate child (the verdict's `jit`); a second verdict of the same files loads both from
    the candidate's own cache. The copy carries a fresh comment: content no earlier test judged."""
    import shutil
    import uuid

    from kernelwright.core.records import Status
    from kernelwright.judge.evaluate import evaluate

    cand = tmp_path / "cand"
    shutil.copytree(CANDIDATES / "relu_triton_autotune", cand)
    with (cand / "model_new.py").open("a") as f:
        f.write(f"# {uuid.uuid4()}\n")
    policy = timing_policy(allow_torch_compute=False, seeds=(11, 12, 13))  # fixed: the same extra shapes, the same autotuning keys
    first = evaluate(PROBLEMS / "relu.py", cand, policy, device="cuda")
    second = evaluate(PROBLEMS / "relu.py", cand, policy, device="cuda")
    assert first.status is Status.CORRECT and second.status is Status.CORRECT, (first.log, second.log)
    assert first.jit["cache"] == "candidate" and first.jit["compiles"] >= 3 and first.jit["configs_benchmarked"] >= 3, first.jit
    assert second.jit["configs_benchmarked"] == 0 and second.jit["compile_s"] < first.jit["compile_s"], (first.jit, second.jit)
    assert "kw_relu_tuned_kernel" in _provenance(first)


def test_two_verdicts_of_the_same_triton_files_at_once_do_not_share_the_cache(tmp_path):
    """A confined child takes the candidate's cache folder for its own uid: while one verdict holds
    the folder's lock, a second verdict of the same files uses its child's own cache (`process`)."""
    import shutil
    import threading
    import uuid

    from kernelwright.judge.evaluate import evaluate

    cand = tmp_path / "cand"
    shutil.copytree(CANDIDATES / "relu_triton", cand)
    with (cand / "model_new.py").open("a") as f:
        f.write(f"# {uuid.uuid4()}\n")
    policy = timing_policy(allow_torch_compute=False)
    verdicts: list = []
    threads = [threading.Thread(target=lambda: verdicts.append(evaluate(PROBLEMS / "relu.py", cand, policy, device="cuda"))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert [v.status.value for v in verdicts] == ["correct", "correct"], [v.log for v in verdicts]
    assert sorted(v.jit["cache"] for v in verdicts) == ["candidate", "process"], [v.jit for v in verdicts]


def test_a_candidate_that_calls_torch_compile_has_inductors_kernels_refused_as_a_library():
    """With the op audit and the thread check off, what stays between torch.compile's Triton kernels
    and a `correct` is the provenance step: Inductor names its kernels triton_*, the `triton` library's whoever runs
    them, and the default policy allows no library."""
    from kernelwright.core.records import Status
    from kernelwright.judge.evaluate import evaluate

    # between_calls off too: Inductor's compile threads alive between timed calls refuse it there (tests/zoo.py)
    policy = timing_policy(allow_torch_compute=False, disabled_steps=frozenset({"op_audit", "between_calls"}))
    v = evaluate(PROBLEMS / "relu.py", CANDIDATES / "zoo_compile_inside", policy, device="cuda")
    assert v.status is Status.REJECTED and "kernel_provenance" in [g.name for g in v.guards if g.fired], v.log
    assert "triton" in _provenance(v) and "triton_" in _provenance(v), _provenance(v)
