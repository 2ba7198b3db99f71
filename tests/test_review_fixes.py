"""Behaviours added after review: flags checked against their pinned values (at import and during
timing), the judged snapshot of the candidate, strict JSON, a verdict for a failure of the judge
itself, and the write floor."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import JUDGE_TIMEOUT_S, candidate, correctness_policy, judge, timing_policy
from kernelwright.judge import evaluate as evaluate_module
from kernelwright.judge.correctness import compare_outputs
from kernelwright.judge.policy import TimingConfig
from kernelwright.core.records import Status

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


def test_tf32_switched_on_at_import_is_rejected():
    v = judge("rowsum", "rowsum_tf32_at_import")
    assert v.status is Status.REJECTED, v.log
    assert any(g.name == "numerics_flags" and g.fired for g in v.guards)


def test_tf32_switched_on_during_timing_is_rejected():
    timing = TimingConfig(min_runs=40, max_runs=60, batch=5, budget_s=5, warmup_ms=0, recheck=1)
    v = judge("rowsum", "rowsum_tf32_later", timing_policy(timing=timing))
    assert v.status is Status.REJECTED, v.log
    assert "during timing" in v.log


def test_a_function_replaced_during_timing_is_rejected():
    # the watch runs after each batch as its own command, outside the batch's wall clock
    timing = TimingConfig(min_runs=40, max_runs=60, batch=5, budget_s=5, warmup_ms=0, recheck=1)
    v = judge("rowsum", "rowsum_patches_allclose_in_timing", timing_policy(timing=timing))
    assert v.status is Status.REJECTED, v.log
    assert "during timing" in v.log and "torch.allclose" in v.log, v.log
    assert any(g.name == "function_identities" and g.fired for g in v.guards)


def test_honest_candidate_keeps_the_numerics_guard_quiet_through_timing():
    timing = TimingConfig(min_runs=40, max_runs=60, batch=5, budget_s=5, warmup_ms=0, recheck=1)
    v = judge("rowsum", "rowsum_correct", timing_policy(timing=timing))
    assert v.status is Status.CORRECT, v.log
    assert not any(g.fired for g in v.guards)


def test_a_candidate_rewriting_its_own_file_changes_only_the_judges_copy():
    path = candidate("rowsum_rewrites_itself") / "model_new.py"
    before = path.read_bytes()
    v = judge("rowsum", "rowsum_rewrites_itself")
    assert v.status is Status.CORRECT, v.log
    assert path.read_bytes() == before


def test_shape_mismatch_verdict_is_strict_json():
    """A wrong-shaped output has no error figures: the verdict says null for them, never NaN or
    Infinity, and its JSON parses without non-standard constants."""
    result = compare_outputs([torch.zeros(3)], [torch.zeros(4)], 1e-4, 1e-4, strict=True)
    assert not result.ok and result.max_abs_error is None
    v = judge("rowsum", "rowsum_wrong_shape", correctness_policy())
    assert v.status is Status.INCORRECT and "shape" in v.log, v.log
    assert any(g.name == "output_checks" and g.fired for g in v.guards), v.guards

    def refuse(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")

    data = json.loads(v.to_json(), parse_constant=refuse)  # NaN / Infinity would land here
    assert data["status"] == "incorrect"
    assert data["max_abs_error"] is None and data["max_rel_error"] is None
    assert v.max_abs_error is None and v.max_rel_error is None  # not comparable: no figures, not NaN


def test_a_failure_of_the_judge_itself_is_an_infra_error_verdict(monkeypatch):
    def broken(*_a, **_k):
        raise RuntimeError("simulated judge bug")

    monkeypatch.setattr(evaluate_module, "discover", broken)
    v = judge("rowsum", "rowsum_correct")
    assert v.status is Status.INFRA_ERROR
    assert "simulated judge bug" in v.log


def test_write_floor_refuses_only_what_no_correct_kernel_can_do():
    from kernelwright.judge.guards.physics_floor import floor_and_efficiency

    # diag(a) @ b at n = 4096: the reference does 2 n^3 FLOPs; a row scaling does n^2.
    n = 4096
    meta = {"bytes": 3 * n * n * 4, "flops": 2 * n**3, "output_bytes": [n * n * 4], "outputs": [{"dtype": "float32"}], "gpu": "NVIDIA H200"}
    floor, write_floor, _ = floor_and_efficiency(meta, 0.03, "fp32")
    assert write_floor < 0.03 < floor  # an honest row-scaling kernel sits between the two
    assert write_floor == pytest.approx(n * n * 4 / 4.8e12 * 1e3)


def test_the_floors_take_the_gpus_own_peaks_and_the_refusal_never_gets_stricter():
    """A GPU with more bandwidth than the H200 (a B200) is refused only under its own write floor,
    where the H200's would refuse an honest kernel writing at 6 TB/s; a slower one (an H100) reports
    its own, higher full floor, while its refusal keeps the H200's bandwidth; a GPU the table lacks
    is refused only under the highest bandwidth the table knows."""
    from kernelwright.judge import roofline
    from kernelwright.judge.guards.physics_floor import floor_and_efficiency

    out = 256 << 20  # a 256 MiB output, written and nothing read

    def meta(gpu):
        return {"bytes": out, "flops": 0, "output_bytes": [out], "outputs": [{"dtype": "float32"}], "gpu": gpu}

    at_6_tb_s = out / 6e12 * 1e3
    floor, write_floor, _ = floor_and_efficiency(meta("NVIDIA B200"), at_6_tb_s, "fp32")
    assert write_floor == pytest.approx(out / 8e12 * 1e3) and write_floor < at_6_tb_s  # not refused
    assert floor == pytest.approx(out / 8e12 * 1e3)
    floor, write_floor, _ = floor_and_efficiency(meta("NVIDIA H100 80GB HBM3"), 1.0, "fp32")
    assert floor == pytest.approx(out / 3.35e12 * 1e3) and write_floor == pytest.approx(out / 4.8e12 * 1e3)
    assert roofline.peaks_for("NVIDIA H100 PCIe").bytes_per_s == 2.0e12 and roofline.peaks_for("NVIDIA GH200 480GB").gpu == "GH200"
    assert roofline.peaks_for("NVIDIA H200 NVL").flops_per_s == 835e12 and roofline.peaks_for("NVIDIA A100-SXM4-40GB").bytes_per_s == 1.555e12
    assert roofline.peaks_for("NVIDIA A100 80GB PCIe").bytes_per_s == 1.935e12 and roofline.peaks_for("NVIDIA H100 NVL").gpu == "H100 NVL"
    assert not roofline.peaks_for("NVIDIA GB200").known and not roofline.peaks_for("NVIDIA RTX A1000").known  # whole words only
    assert roofline.peaks_for("NVIDIA H100 80GB HBM3 MIG 1g.10gb").gpu == "H100"
    floor, write_floor, _ = floor_and_efficiency(meta("NVIDIA Z9000"), 1.0, "fp32")
    assert not roofline.peaks_for("NVIDIA Z9000").known and floor == pytest.approx(out / 4.8e12 * 1e3)
    assert write_floor == pytest.approx(out / max(bw for _, bw, _ in roofline.GPU_PEAKS) * 1e3)
    floor, _, _ = floor_and_efficiency({**meta(None), "gpu": None}, 1.0, "fp32")  # the CPU backend: the H200's figure
    assert floor == pytest.approx(out / 4.8e12 * 1e3)


def test_int64_outputs_must_match_exactly_beyond_float64_precision():
    from kernelwright.judge.correctness import compare

    big = torch.tensor([2**60, 7])
    assert not compare(big, big + torch.tensor([1, 0]), 1e-4, 1e-4).ok
    assert compare(big, big.clone(), 1e-4, 1e-4).ok


def test_each_output_gets_the_tolerance_of_its_dtype():
    ref = [torch.ones(4), torch.ones(4, dtype=torch.bfloat16)]
    out = [torch.ones(4), torch.full((4,), 1.0078125, dtype=torch.bfloat16)]  # one bf16 ulp above 1
    assert compare_outputs(ref, out, 1e-4, 1e-4, True, [(1e-4, 1e-4), (1e-2, 1e-2)]).ok
    assert not compare_outputs(ref, out, 1e-4, 1e-4, True).ok


def test_a_problem_with_windows_line_endings_is_judged(tmp_path):
    from kernelwright.judge.evaluate import evaluate

    text = (candidate("rowsum_correct").parents[1] / "problems" / "rowsum.py").read_text()
    crlf = tmp_path / "rowsum_crlf.py"
    crlf.write_bytes(text.replace("\n", "\r\n").encode())
    v = evaluate(crlf, candidate("rowsum_correct"), correctness_policy(), device="cpu")
    assert v.status is Status.CORRECT, v.log


def test_a_problem_that_sets_numerics_flags_itself_does_not_make_candidates_rejected(tmp_path):
    from kernelwright.judge.evaluate import evaluate

    text = (candidate("rowsum_correct").parents[1] / "problems" / "rowsum.py").read_text()
    path = tmp_path / "rowsum_flags.py"
    path.write_text('import torch\ntorch.set_float32_matmul_precision("high")\n' + text)
    v = evaluate(path, candidate("rowsum_correct"), correctness_policy(), device="cpu")
    assert v.status is Status.CORRECT, v.log


def test_a_model_new_file_is_judged_with_the_modules_beside_it():
    from kernelwright.judge.evaluate import evaluate

    problem = candidate("rowsum_correct").parents[1] / "problems" / "rowsum.py"
    v = evaluate(problem, candidate("rowsum_with_helper") / "model_new.py", correctness_policy(), device="cpu")
    assert v.status is Status.CORRECT, v.log


def test_write_floor_counts_what_an_output_really_occupies():
    from kernelwright.judge.child_reference import _written_bytes

    x = torch.randn(64, 1)
    assert _written_bytes(x.expand(64, 4096), [torch.zeros(1)]) == 64 * 4  # a broadcast writes its storage only
    assert _written_bytes(x.t(), [x]) == 0  # a view of an input writes nothing
    y = torch.randn(8, 8)
    assert _written_bytes(y, [x]) == 8 * 8 * 4


def test_pipelined_cases_report_the_earliest_failure_and_only_its_guards():
    v = judge("rowsum", "rowsum_wrong_then_tf32")
    assert v.status is Status.INCORRECT, (v.status, v.log)
    assert v.log.startswith("case native-"), v.log
    assert not any(g.fired for g in v.guards), v.guards


def test_a_childs_seconds_are_printed_whatever_their_form_and_a_slow_fork_says_where():
    """The progress line's child seconds (judge.flow_children._seconds): a candidate can forge its setup
    reply, so child_seconds of the wrong form (or a large one: the line would grow with it) is a
    forged reply (judge.replies), and the line itself never fails on one and names only the fork
    steps it knows; a forked child slow to reach its own code names them (a cold reference child
    took 2.8 s there on the H200 at e2fbfda)."""
    from kernelwright.judge import replies
    from kernelwright.judge.flow_children import _seconds

    assert replies.malformed({"child_seconds": {"command": "1"}}) == "child_seconds"
    assert replies.malformed({"child_seconds": [1.0]}) == "child_seconds"
    assert replies.malformed({"child_seconds": {"command": 1e308}}) == "child_seconds"
    assert replies.malformed({"child_seconds": {"command": 10**400}}) == "child_seconds"
    assert replies.malformed({"child_seconds": {f"fork_{i}": 0.1 for i in range(9)}}) == "child_seconds"
    assert replies.malformed({"child_seconds": {"command": 0.5, "fork_started": 0.01}}) == ""
    assert _seconds({"child_seconds": "x"}) == "nan s start-up, nan s setup"
    assert _seconds({"child_seconds": {"before_command": 10**400, "command": 1e308}}) == "nan s start-up, nan s setup"
    quick = {"child_seconds": {"before_command": 0.3, "command": 0.5, "fork_session": 0.0, "fork_started": 0.01}}
    assert _seconds(quick) == "0.30 s start-up, 0.50 s setup"
    slow = {"child_seconds": {"before_command": 0.3, "command": 0.5, "fork_forked": 0.01, "fork_session": 0.02, "fork_descriptors": 2.7,
                              "fork_started": 2.8, "fork_made_up": 1.0}}
    assert _seconds(slow) == "0.30 s start-up, 0.50 s setup; seconds from its fork: forked 0.01, session 0.02, descriptors 2.70, started 2.80"


def test_the_report_names_whose_peaks_the_floor_is_at():
    from types import SimpleNamespace

    from kernelwright.report.summary import _floor_label

    def label(gpu):
        return _floor_label(SimpleNamespace(system=SimpleNamespace(gpu=gpu)))

    assert label("NVIDIA H100 80GB HBM3") == "floor (H100 peaks)" and label("NVIDIA B200") == "floor (B200 peaks)"
    assert label("NVIDIA Z9000") == "floor (H200 peaks)" and label(None) == "floor (H200 peaks)"
    assert _floor_label(SimpleNamespace(system=None)) == "floor (H200 peaks)"
