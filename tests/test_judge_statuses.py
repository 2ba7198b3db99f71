"""Every verdict status, reached through real judge children on the CPU backend.

Known-bad candidates assert their exact status; honest controls must pass. A watchdog (timeout
mark) sits on every test that runs generated code.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from conftest import JUDGE_TIMEOUT_S, TINY_TIMING, correctness_policy, judge, timing_policy
from kernelwright.judge.policy import ALL_STEPS, CORRECTNESS_STEPS
from kernelwright.core.records import Status

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)

# DESIGN.md "The verdict (schema_version 1)": every top-level key, always present.
VERDICT_KEYS = (
    "schema_version", "status", "problem", "candidate", "policy", "build_s", "runtime_ms", "eager_ms",
    "compile_ms", "baseline_source", "speedup_vs_eager", "speedup_vs_compile", "speedup_vs_best",
    "max_abs_error", "max_rel_error", "floor_ms", "efficiency", "guards", "static_findings", "steps",
    "timing", "resources", "log", "system", "created_at",
)
CPU_ONLY_TIMING_STEPS = ("l2_flush", "cuda_events", "device_sync", "harness_overhead")


@pytest.fixture(scope="module")
def timed_verdict():
    """rowsum_correct with timing on (CPU, tiny timing config, eager baseline measured)."""
    return judge("rowsum", "rowsum_correct", timing_policy())


# -- honest controls ---------------------------------------------------------------------------


def test_correct_candidate_is_correct():
    v = judge("rowsum", "rowsum_correct")
    assert v.status is Status.CORRECT, v.log
    assert v.max_abs_error is not None and v.max_abs_error < 0.05  # the "large" inputs reach ~1e3
    ran = {s.name for s in v.steps if s.ran}
    assert set(CORRECTNESS_STEPS) - {"timed_recheck", "between_calls"} <= ran  # those two are the timing phase's
    assert v.candidate["build_path"] == "raw" and v.candidate["hash"]


def test_reordered_summation_is_correct():
    v = judge("rowsum", "rowsum_reordered")
    assert v.status is Status.CORRECT, v.log
    assert v.max_abs_error is not None and v.max_abs_error > 0  # differs in the last bits, within tolerance


# -- incorrect, compile, runtime, timeout ------------------------------------------------------


def test_wrong_kernel_is_incorrect_with_counts_and_indices():
    v = judge("rowsum", "rowsum_wrong")
    assert v.status is Status.INCORRECT
    m = re.search(r"(\d+) of (\d+) elements differ", v.log)
    assert m, v.log
    assert 0 < int(m.group(1)) <= int(m.group(2))
    assert re.search(r"first: \[\d+\]: got", v.log), v.log  # the first mismatching index, with got/expected values (row 0 can
    # match by chance under some seeds: 63 of 64 differed once, first [1])
    assert "expected" in v.log


def test_cpp_compile_error_is_compile_error_with_gxx_line():
    v = judge("rowsum", "rowsum_compile_error")
    assert v.status is Status.COMPILE_ERROR
    assert re.search(r"\.cpp:5:\d+: error: expected", v.log), v.log  # the g++ error line, file:line:col
    assert v.runtime_ms is None and v.max_abs_error is None


def test_python_syntax_error_in_model_new_is_compile_error():
    v = judge("rowsum", "rowsum_syntax_error")
    assert v.status is Status.COMPILE_ERROR
    assert "syntax error" in v.log and "model_new.py" in v.log


def test_candidate_without_modelnew_is_compile_error():
    v = judge("rowsum", "rowsum_no_modelnew")
    assert v.status is Status.COMPILE_ERROR
    assert "ModelNew" in v.log


def test_infinite_loop_times_out_fast():
    t0 = time.monotonic()
    v = judge("rowsum", "rowsum_infinite_loop", correctness_policy(run_timeout_s=5))
    elapsed = time.monotonic() - t0
    assert v.status is Status.TIMEOUT, v.log
    assert "exceeded 5 s" in v.log
    assert elapsed < 40, f"the judge took {elapsed:.1f} s to give up on a 5 s limit"


def test_segfault_is_runtime_error_and_the_caller_is_unharmed():
    v = judge("rowsum", "rowsum_segfault")
    assert v.status is Status.RUNTIME_ERROR
    assert "SIGSEGV" in v.log
    after = judge("rowsum", "rowsum_correct")  # same test process, right after the crash
    assert after.status is Status.CORRECT, after.log


def test_python_exception_is_runtime_error():
    v = judge("rowsum", "rowsum_python_error")
    assert v.status is Status.RUNTIME_ERROR
    assert "ValueError" in v.log and "forward always raises" in v.log


def test_absurd_allocation_is_runtime_error_about_memory():
    v = judge("rowsum", "rowsum_huge_alloc")
    assert v.status is Status.RUNTIME_ERROR
    assert "memory" in v.log.lower(), v.log


def test_cuda_without_gpu_is_infra_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: this test is about machines without one")
    v = judge("rowsum", "rowsum_correct", device="cuda")
    assert v.status is Status.INFRA_ERROR
    assert "no GPU" in v.log


# -- forged results ----------------------------------------------------------------------------


def test_forged_verdict_on_stdout_then_exit_is_runtime_error():
    v = judge("rowsum", "rowsum_fake_verdict")
    assert v.status is Status.RUNTIME_ERROR, v.log
    assert "exited with code 0" in v.log


def test_garbage_on_every_fd_is_not_correct():
    v = judge("rowsum", "rowsum_fd_spray")
    assert v.status in (Status.REJECTED, Status.RUNTIME_ERROR), v.log
    assert v.status is not Status.CORRECT


# -- the verdict record ------------------------------------------------------------------------


def test_verdict_json_has_every_schema_key_and_every_step_once(timed_verdict):
    d = json.loads(timed_verdict.to_json())
    assert set(VERDICT_KEYS) <= set(d), sorted(set(VERDICT_KEYS) - set(d))
    assert d["schema_version"] == 1 and d["status"] == "correct"
    assert set(d["problem"]) >= {"name", "hash"} and d["problem"]["name"] == "rowsum"
    assert set(d["candidate"]) >= {"hash", "build_path"}
    assert set(d["timing"]) >= {"n", "median_ms", "iqr_ms", "wall_ms", "profiler_ms"}
    assert set(d["system"]) >= {"gpu", "driver", "cuda", "torch", "python", "kernelwright"}
    names = [s["name"] for s in d["steps"]]
    assert sorted(names) == sorted(ALL_STEPS) and len(names) == len(set(names))
    for s in d["steps"]:
        assert set(s) == {"name", "ran", "reason"} and isinstance(s["ran"], bool)
        if not s["ran"]:
            assert s["reason"], f"step {s['name']} did not run and says no reason"
    for g in d["guards"]:
        assert set(g) == {"name", "fired", "detail"}


def test_timing_on_cpu_fills_numbers_and_marks_gpu_steps(timed_verdict):
    v = timed_verdict
    assert v.status is Status.CORRECT, v.log
    assert v.runtime_ms and v.runtime_ms > 0
    assert v.eager_ms and v.eager_ms > 0
    assert v.speedup_vs_eager == pytest.approx(v.eager_ms / v.runtime_ms)
    assert v.compile_ms is None  # compile_baseline off
    assert v.baseline_source is not None and v.baseline_source.value == "measured"
    assert v.timing is not None and v.timing.n >= TINY_TIMING.min_runs
    steps = {s.name: s for s in v.steps}
    for name in CPU_ONLY_TIMING_STEPS:
        assert steps[name].ran is False and "CPU" in steps[name].reason, steps[name]
    assert steps["timed_recheck"].ran and steps["fresh_inputs"].ran and steps["warmup"].ran
    assert v.floor_ms is not None and v.floor_ms > 0


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_a_candidate_cannot_report_its_failure_as_the_judges():
    """An error the candidate child reports with kind "infra" comes from a process that ran the
    candidate's code: it is the candidate's runtime_error, never infra_error (which a reward leaves
    out instead of paying -1). The honest control beside it stays correct."""
    forged = judge("relu", "relu_forged_infra")
    assert forged.status is Status.RUNTIME_ERROR, (forged.status, forged.log)
    assert "the judge failed, not me" in forged.log
    assert judge("relu", "relu_correct").status is Status.CORRECT
