"""The precision policy: strict fp32 by default, allowances that loosen the tolerance and give the
baselines the same numerics, and the kernelbench preset."""

from __future__ import annotations

import json

import pytest

from conftest import JUDGE_TIMEOUT_S, TINY_TIMING, cli, correctness_policy, judge, problem, candidate
from kernelwright.judge.policy import PRECISION_TOLERANCE, Policy, kernelbench_preset, resolve_tolerance
from kernelwright.core.records import Status

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


def test_allowances_loosen_only_float32_outputs_and_never_tighten():
    assert resolve_tolerance("float32", None, None, None) == (1e-4, 1e-4)
    assert resolve_tolerance("float32", None, None, None, "bf16") == (PRECISION_TOLERANCE["bf16"]["atol"], PRECISION_TOLERANCE["bf16"]["rtol"])
    assert resolve_tolerance("float16", None, None, None, "bf16") == (1e-3, 1e-3)  # a half output keeps its own default
    assert resolve_tolerance("float32", {"atol": 0.5}, None, None, "fp16") == (0.5, PRECISION_TOLERANCE["fp16"]["rtol"])
    assert resolve_tolerance("float32", None, 1e-6, None, "bf16")[0] == 1e-6  # the policy's own number wins


def test_half_precision_inputs_fail_strict_fp32_and_pass_with_the_allowance():
    strict = judge("rowsum", "rowsum_half_inputs", correctness_policy())
    assert strict.status is Status.INCORRECT, strict.log
    for precision in ("fp16", "bf16"):
        allowed = judge("rowsum", "rowsum_half_inputs", correctness_policy(precision=precision))
        assert allowed.status is Status.CORRECT, (precision, allowed.log)


def test_accumulating_in_fp16_is_more_than_the_fp16_allowance():
    v = judge("rowsum", "zoo_fp16_inside", correctness_policy(precision="fp16"))
    assert v.status is Status.INCORRECT, v.log


@pytest.mark.parametrize("fixture", ["rowsum_correct", "rowsum_reordered", "zoo_rowsum_pairwise"])
def test_exact_kernels_in_any_summation_order_pass_strict_fp32(fixture):
    v = judge("rowsum", fixture, correctness_policy())
    assert v.status is Status.CORRECT and v.max_rel_error is not None and v.max_rel_error < 1.0, v.log


def test_baselines_are_timed_with_the_allowance():
    v = judge("rowsum", "rowsum_correct", Policy(time_candidate=True, compile_baseline=False, baselines="measured",
                                                 timing=TINY_TIMING, precision="bf16"))
    assert v.status is Status.CORRECT, v.log
    interleave = next(s for s in v.steps if s.name == "interleave")
    assert "autocast to bf16" in interleave.reason, interleave
    assert v.policy["precision"] == "bf16" and v.eager_ms is not None


def test_kernelbench_preset_takes_kernelbench_settings_and_keeps_every_guard():
    p = kernelbench_preset()
    assert (p.atol, p.rtol, p.n_seeds, p.distributions, p.preset) == (1e-2, 1e-2, 5, (), "kernelbench")
    assert p.timing.min_runs == p.timing.max_runs == 100 and not p.enabled("l2_flush") and not p.enabled("extra_shapes")
    assert p.enabled("op_audit") and p.enabled("near_duplicate") and p.enabled("function_identities")
    v = judge("rowsum", "rowsum_torch", kernelbench_preset(compile_baseline=False))
    assert v.status is Status.REJECTED, v.log  # KernelBench would accept torch compute; the guards here do not
    assert v.policy["preset"] == "kernelbench"


def test_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="unknown preset"):
        Policy(preset="fastest")


@pytest.mark.timeout(200)
def test_cli_preset_and_precision():
    res = cli("eval", str(problem("rowsum")), str(candidate("rowsum_correct")), "--device", "cpu", "--json", "--no-store",
              "--preset", "kernelbench", "--precision", "bf16", "--no-compile-baseline", timeout=190)
    assert res.returncode == 0, res.stderr[-2000:]
    v = json.loads(res.stdout)
    assert v["status"] == "correct" and v["policy"]["preset"] == "kernelbench" and v["policy"]["precision"] == "bf16", v["log"]
    assert 100 <= v["timing"]["n"] <= 110  # 100 timed calls, and the judge's re-checks
    bad = cli("eval", str(problem("rowsum")), str(candidate("rowsum_correct")), "--preset", "fastest")
    assert bad.returncode == 2
