"""Step precision (judge.guards.precision): reduced precision inside refused under an fp32 policy,
even where a loose tolerance lets the answer through; honest fp32 reorderings accepted."""

from __future__ import annotations

import pytest
import torch

from conftest import JUDGE_TIMEOUT_S, correctness_policy, judge
from kernelwright.judge.guards import precision as pg
from kernelwright.core.records import Status

EPS = pg.EPS32
KB = dict(atol=1e-2, rtol=1e-2, distributions=())  # KernelBench's tolerance, get_inputs() only


def test_fp16_tf32_and_bf16_errors_fire_and_honest_reorderings_do_not():
    # figures measured on randn products and sums (the module docstring)
    for e_c in (1600 * EPS, 2400 * EPS, 24000 * EPS):
        fired, detail = pg.decide([{"index": 0, "e_c": e_c, "e_r": 3 * EPS, "bitwise": False}])
        assert fired and "float32 epsilons" in detail
    for e_c in (1 * EPS, 40 * EPS, 155 * EPS):  # torch's own, naive sums of 2**16 and 2**20 terms
        assert not pg.decide([{"index": 0, "e_c": e_c, "e_r": 1.3 * EPS, "bitwise": False}])[0]
    # a reference far from the oracle itself (cancellation) carries its candidates' allowance
    assert not pg.decide([{"index": 0, "e_c": 2000 * EPS, "e_r": 100 * EPS, "bitwise": False}])[0]


def test_the_worst_output_decides_and_a_bitwise_oracle_never_refuses():
    rows = [{"index": 0, "e_c": EPS, "e_r": EPS, "bitwise": False}, {"index": 1, "e_c": 3000 * EPS, "e_r": EPS, "bitwise": False}]
    fired, detail = pg.decide(rows)
    assert fired and detail.startswith("output 1 ")
    fired, detail = pg.decide([{"index": 0, "e_c": 3000 * EPS, "e_r": 0.0, "bitwise": True}])
    assert not fired and "not refused" in detail


def test_figures_skip_outputs_the_oracle_cannot_judge():
    r = torch.randn(4, 8)
    rows, why, _ = pg.figures([r, torch.arange(3)], [r.double() * (1 + 1e-9), torch.arange(3)])
    assert [x["index"] for x in rows] == [0] and not rows[0]["bitwise"] and "int64, not float32" in why
    rows, why, _ = pg.figures([r], [r.clone()])  # the forward casts to float32 inside
    assert rows == [] and "casts inside" in why
    rows, _, _ = pg.figures([r], [r.double()])
    assert rows[0]["bitwise"] and rows[0]["e_r"] == 0.0


def test_a_large_output_is_measured_on_a_secret_sample_that_still_catches_half_precision(monkeypatch):
    monkeypatch.setattr(pg, "SAMPLE", 4096)
    a, b = torch.randn(256, 512), torch.randn(512, 128)  # 32768 outputs, 8x the sample
    oracle = a.double() @ b.double()
    ref = a @ b
    rows, why, kept = pg.figures([ref], [oracle])
    idx, o_s = kept[0]
    assert why == "" and idx is not None and idx.numel() == 4096 and o_s.dtype == torch.float64 and o_s.numel() == 4096
    assert rows[0]["e_r"] == pytest.approx(pg.rel_l2(ref, oracle), rel=0.2)  # the sample's estimate of the whole error
    half = (a.half() @ b.half()).float()
    e_c = pg.candidate_error(half, kept[0])
    assert e_c == pytest.approx(pg.rel_l2(half, oracle), rel=0.2)
    assert pg.decide([{**rows[0], "e_c": e_c}])[0]  # refused, as on the whole output
    assert not pg.decide([{**rows[0], "e_c": pg.candidate_error(ref.clone(), kept[0])}])[0]
    # a candidate that keeps fp32 on most elements and cuts a tenth to half precision is still seen
    mixed = ref.clone().reshape(-1)
    mixed[: mixed.numel() // 10] = half.reshape(-1)[: mixed.numel() // 10]
    assert pg.decide([{**rows[0], "e_c": pg.candidate_error(mixed.reshape(ref.shape), kept[0])}])[0]
    # two draws pick different elements: the sample is not a fixed set a candidate could learn
    _, _, again = pg.figures([ref], [oracle])
    assert not torch.equal(again[0][0], idx)


def test_a_small_output_is_measured_whole():
    r = torch.randn(8, 8)
    rows, _, kept = pg.figures([r], [r.double() * (1 + 1e-7)])
    assert kept[0][0] is None and kept[0][1].numel() == 64
    assert pg.candidate_error(r, kept[0]) == pytest.approx(rows[0]["e_r"])


def test_the_oracle_runs_the_model_in_float64_on_a_copy():
    lin = torch.nn.Linear(16, 4)
    outs = pg.oracle_outputs(lin, [torch.randn(3, 16)], torch.device("cpu"))
    assert outs[0].dtype == torch.float64 and lin.weight.dtype == torch.float32  # a copy: the model is untouched
    x = torch.randn(3, 16)
    assert pg.rel_l2(lin(x).detach(), pg.oracle_outputs(lin, [x], torch.device("cpu"))[0]) < 8 * EPS


def test_placement_keeps_to_the_memory_the_verdict_reserved():
    small = {"memory": {"input_bytes": 1 << 20, "output_bytes": 1 << 20, "param_bytes": 0, "forward_peak_bytes": 2 << 20}, "flops": 1e9}
    assert pg.placement(small, None, cuda=False) == ("device", "")
    assert pg.placement(small, 8 << 20, cuda=True) == ("device", "")
    assert pg.placement(small, 1 << 20, cuda=True) == ("host", "")  # no room on the GPU; small enough on the host
    big = {"memory": {"input_bytes": 3 << 30, "output_bytes": 1 << 20, "param_bytes": 0}, "flops": 1e12}
    where, why = pg.placement(big, 1 << 30, cuda=True)
    assert where is None and "GiB" in why
    assert pg.placement(big, None, cuda=False)[0] is None


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_fp16_operands_pass_a_loose_tolerance_and_are_rejected_by_step_precision():
    on = judge("matmul", "zoo_matmul_fp16_operands", correctness_policy(**KB))
    off = judge("matmul", "zoo_matmul_fp16_operands", correctness_policy(disabled_steps=frozenset({"precision"}), **KB))
    assert off.status is Status.CORRECT, off.log
    assert on.status is Status.REJECTED and "reduced precision" in on.log, on.log
    assert next(g for g in on.guards if g.name == "precision").fired
    assert next(s for s in off.steps if s.name == "precision").ran is False


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_an_allowance_switches_the_step_off_and_an_honest_kernel_passes_it():
    v = judge("matmul", "zoo_matmul_fp16_operands", correctness_policy(precision="fp16", **KB))
    assert v.status is Status.CORRECT, v.log
    step = next(s for s in v.steps if s.name == "precision")
    assert step.ran is False and "allows fp16" in step.reason
    v = judge("matmul", "zoo_matmul_naive", correctness_policy())
    assert v.status is Status.CORRECT, v.log
    step = next(s for s in v.steps if s.name == "precision")
    assert step.ran and "e_c" in step.reason


def test_the_oracles_case_is_drawn_in_secret_among_the_get_inputs_cases():
    """A candidate that counts its calls must not know which one the oracle checks (it was always the first)."""
    from kernelwright.core.records import Case
    from kernelwright.judge.policy import Policy

    cases = [Case("native", s) for s in (11, 12, 13)] + [Case("normal", 14), Case("near", 15)]
    picked = {pg.oracle_spec(Policy(), cases, {}, None, cuda=False)[0]["case"] for _ in range(200)}
    assert picked == {0, 1, 2}


def test_an_oracle_that_runs_out_of_gpu_memory_runs_again_on_the_host():
    """A candidate filling the GPU must not make the step skip: the float64 run moves to the host."""
    import torch

    where = []

    def run(model, values, device):
        where.append(torch.device(device).type)
        if torch.device(device).type == "cuda":
            raise torch.OutOfMemoryError("full")
        return ["out"]

    assert pg.oracle_on(None, [], "cuda", run=run) == ["out"] and where == ["cuda", "cpu"]


def test_the_timed_recheck_test_refuses_half_precision_and_accepts_a_reordered_fp32_sum():
    torch.manual_seed(0)
    a, b = torch.randn(64, 1024), torch.randn(1024, 48)
    ref, oracle = a @ b, a.double() @ b.double()
    rows, _, _ = pg.figures([ref], [oracle])
    half = (a.half() @ b.half()).float()
    assert pg.DRIFT in pg.drifted([half], [ref], rows)
    naive = torch.zeros(64, 48)
    for k in range(0, 1024, 64):  # another summation order, in fp32
        naive += a[:, k:k + 64] @ b[k:k + 64]
    assert pg.drifted([naive], [ref], rows) == ""


def test_the_timed_recheck_test_is_not_switched_off_by_a_non_finite_element_both_outputs_share():
    # the tolerance matches equal Inf or NaN in both outputs; counted in the distance, one made it NaN, and NaN > limit is False
    torch.manual_seed(0)
    a, b = torch.randn(64, 1024), torch.randn(1024, 48)
    ref, oracle = a @ b, a.double() @ b.double()
    rows, _, _ = pg.figures([ref], [oracle])
    half = (a.half() @ b.half()).float()
    ref[3, 5] = half[3, 5] = float("inf")
    ref[7, 1] = half[7, 1] = float("nan")
    assert pg.DRIFT in pg.drifted([half], [ref], rows)
    honest = ref.clone()
    assert pg.drifted([honest], [ref], rows) == ""


def test_the_timed_recheck_test_leaves_small_and_bitwise_outputs_alone():
    # a scalar's e_r varies by orders of magnitude from one input to the next (a sum that cancels), and
    # a row whose float64 run equalled the fp32 one is not refused at the oracle's case either
    tiny = [{"index": 0, "e_r": 1e-9, "bitwise": False}]
    r = torch.randn(pg.DRIFT_MIN - 1)
    assert pg.drifted([r * (1 + 1e-3)], [r], tiny) == ""
    exact = [{"index": 0, "e_r": 0.0, "bitwise": True}]
    big = torch.randn(4 * pg.DRIFT_MIN)
    assert pg.drifted([big.half().float()], [big], exact) == ""
    assert pg.DRIFT in pg.drifted([big.half().float()], [big], [{"index": 0, "e_r": 0.0, "bitwise": False}])
