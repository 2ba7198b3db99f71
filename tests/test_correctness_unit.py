"""The one correctness function, unit-tested in process (no children): compare, check_output,
compare_outputs, and the poison helper on the CPU."""

from __future__ import annotations

import math

import pytest
import torch

from kernelwright.judge.correctness import (
    Comparison, as_output_list, check_output, compare, compare_outputs, free_blocks, poison,
)

ATOL = RTOL = 1e-4


def ramp(*shape: int) -> torch.Tensor:
    n = math.prod(shape)
    return (torch.arange(n, dtype=torch.float32) / n - 0.5).reshape(shape)


# -- compare -----------------------------------------------------------------------------------


def test_exact_match():
    r = ramp(4, 5)
    c = compare(r, r.clone(), ATOL, RTOL)
    assert c.ok and c.n_bad == 0 and c.n_total == 20 and c.max_abs_error == 0.0 and c.message == ""


def test_within_tolerance():
    r = ramp(4, 5)
    c = compare(r, r + 5e-5, ATOL, RTOL)  # |r| <= 0.5, scale 1: allowed >= 1e-4
    assert c.ok
    assert c.max_abs_error == pytest.approx(5e-5, rel=1e-2)


def test_out_of_tolerance_counts_and_first_indices():
    r = ramp(4, 5)
    out = r.clone()
    out[1, 2] += 1.0
    out[3, 0] -= 2.0
    out[3, 4] += 0.5
    c = compare(r, out, ATOL, RTOL)
    assert not c.ok and c.n_bad == 3 and c.n_total == 20
    assert c.message.startswith("3 of 20 elements differ")
    assert "[1, 2]: got" in c.message and "[3, 0]" in c.message and "[3, 4]" in c.message
    assert c.message.index("[1, 2]") < c.message.index("[3, 0]") < c.message.index("[3, 4]")  # row-major order
    assert c.max_abs_error == pytest.approx(2.0)


def test_message_names_at_most_five_indices():
    r = torch.zeros(100)
    c = compare(r, torch.ones(100), ATOL, RTOL)
    assert c.n_bad == 100 and c.message.startswith("100 of 100 elements differ")
    assert "[4]" in c.message and "[5]" not in c.message


def test_nan_disagreement_is_counted():
    r = ramp(10)
    out = r.clone()
    out[3] = float("nan")
    out[7] = float("inf")
    c = compare(r, out, ATOL, RTOL)
    assert not c.ok and c.n_bad == 2
    assert "NaN/Inf disagreements: 2 (1 NaN and 1 Inf in the output)" in c.message
    assert math.isfinite(c.max_abs_error)  # non-finite pairs do not poison the error numbers


def test_nan_in_reference_missing_from_output_is_counted():
    r = ramp(10)
    r[2] = float("nan")
    out = r.clone()
    out[2] = 0.0
    c = compare(r, out, ATOL, RTOL)
    assert not c.ok and c.n_bad == 1 and "NaN/Inf disagreements: 1" in c.message


def test_nan_and_inf_agreement_is_accepted():
    r = ramp(10)
    r[1], r[2], r[3] = float("nan"), float("inf"), float("-inf")
    c = compare(r, r.clone(), ATOL, RTOL)
    assert c.ok and c.n_bad == 0


def test_opposite_infinities_disagree():
    r = torch.tensor([float("inf"), 1.0])
    out = torch.tensor([float("-inf"), 1.0])
    assert not compare(r, out, ATOL, RTOL).ok


def test_atol_is_scaled_by_the_reference_rms():
    # rms of the reference ~ 1000: an element near 0 may be off by up to atol * 1000 = 0.1.
    big = torch.full((100,), 1000.0)
    big[0] = 0.0
    out = big.clone()
    out[0] = 0.05
    assert compare(big, out, ATOL, RTOL).ok
    out[0] = 0.2
    c = compare(big, out, ATOL, RTOL)
    assert not c.ok and "scale 99" in c.message  # sqrt(99/100) * 1000 = 994.99
    # Small references are not scaled down: scale is max(1, rms).
    small = torch.zeros(100)
    out = small.clone()
    out[0] = 0.05
    assert not compare(small, out, ATOL, RTOL).ok
    out[0] = 5e-5
    assert compare(small, out, ATOL, RTOL).ok


def test_rtol_is_per_element():
    r = torch.tensor([1e4, 1.0])
    out = torch.tensor([1e4 + 0.5, 1.0])  # 0.5 <= atol * rms(7071) + rtol * 1e4 = 0.707 + 1.0
    assert compare(r, out, ATOL, RTOL).ok
    out = torch.tensor([1e4 + 2.0, 1.0])
    assert not compare(r, out, ATOL, RTOL).ok


def test_bf16_inputs_are_upcast_before_subtracting():
    r = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    out = torch.tensor([1.0078125, 2.0], dtype=torch.bfloat16)  # one bf16 ulp off at 1.0
    c = compare(r, out, 1e-2, 1e-2)
    assert c.ok and c.max_abs_error == 0.0078125
    c = compare(r, out, 1e-3, 1e-3)
    assert not c.ok and c.n_bad == 1 and "[0]: got 1.00781, expected 1" in c.message
    # 258 - 1 = 257 is not a bfloat16 number: only an upcast subtraction reports it exactly.
    far = compare(torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor([258.0], dtype=torch.bfloat16), 1e-2, 1e-2)
    assert far.max_abs_error == 257.0


def test_empty_tensors_match():
    c = compare(torch.empty(0), torch.empty(0), ATOL, RTOL)
    assert c.ok and c.n_total == 0


def test_output_on_another_dtype_compares_by_value():
    r = ramp(8)
    assert compare(r, r.double(), ATOL, RTOL).ok


# -- check_output ------------------------------------------------------------------------------


class SneakyTensor(torch.Tensor):
    """A tensor subclass: could override __eq__, allclose, etc."""


def test_subclass_rejected_when_strict():
    r = ramp(3)
    sub = r.clone().as_subclass(SneakyTensor)
    msg = check_output(r, sub, strict=True)
    assert "exactly torch.Tensor" in msg and "SneakyTensor" in msg
    assert check_output(r, sub, strict=False) == ""


def test_dtype_mismatch():
    r = ramp(3)
    assert "dtype torch.float64 differs" in check_output(r, r.double(), strict=True)
    assert check_output(r, r.double(), strict=False) == ""


def test_shape_mismatch():
    r = ramp(2, 3)
    assert "shape (3, 2) differs from the reference's (2, 3)" in check_output(r, ramp(3, 2), strict=True)
    assert check_output(r, ramp(3, 2), strict=False) == ""  # same numel: allowed when not strict
    assert "shape (7,)" in check_output(r, ramp(7), strict=False)


def test_non_tensor_output():
    r = ramp(3)
    assert "exactly torch.Tensor" in check_output(r, [0.0, 1.0, 2.0], strict=True)
    assert "not a tensor" in check_output(r, [0.0, 1.0, 2.0], strict=False)


def test_acceptable_output():
    r = ramp(2, 3)
    assert check_output(r, r.clone(), strict=True) == ""


# -- compare_outputs ---------------------------------------------------------------------------


def test_compare_outputs_on_tuples():
    a, b = ramp(4), ramp(2, 3)
    ok = compare_outputs([a, b], list((a.clone(), b.clone())), ATOL, RTOL, strict=True)
    assert ok.ok and ok.n_total == 10
    bad_b = b.clone()
    bad_b[1, 1] += 1
    res = compare_outputs([a, b], [a.clone(), bad_b], ATOL, RTOL, strict=True)
    assert not res.ok and res.message.startswith("output 1: 1 of 6 elements differ") and "[1, 1]" in res.message


def test_compare_outputs_count_mismatch():
    a = ramp(4)
    res = compare_outputs([a, a], [a], ATOL, RTOL, strict=True)
    assert not res.ok and res.message == "1 outputs, expected 2"


def test_compare_outputs_type_check_first():
    a = ramp(4)
    res = compare_outputs([a], [a.double()], ATOL, RTOL, strict=True)
    assert not res.ok and res.message.startswith("output 0: dtype")
    assert compare_outputs([a], [a.double()], ATOL, RTOL, strict=False).ok


def test_single_output_message_has_no_prefix():
    a = ramp(4)
    res = compare_outputs([a], [a + 1], ATOL, RTOL, strict=True)
    assert res.message.startswith("4 of 4 elements differ")


def test_as_output_list_and_to_dict():
    t = ramp(2)
    assert as_output_list(t)[0] is t
    assert as_output_list((t, t)) == [t, t]
    d = compare(t, t, ATOL, RTOL).to_dict()
    assert set(d) == {"ok", "max_abs_error", "max_rel_error", "n_bad", "n_total", "message"}
    assert Comparison(**d).ok


def test_poison_runs_on_cpu(monkeypatch):
    """Off CUDA, poison allocates three blocks of each output's size and one of `extra_bytes`,
    every byte 0xFF (a float32 NaN), on the given device; a spy on torch.full keeps
    them to look at."""
    from kernelwright.judge import correctness

    made: list[torch.Tensor] = []
    real_full = torch.full

    def spy(*args, **kwargs):
        made.append(real_full(*args, **kwargs))
        return made[-1]

    def no_cuda(*_a, **_k):
        raise AssertionError("the CUDA way was taken on the CPU")

    monkeypatch.setattr(torch, "full", spy)
    monkeypatch.setattr(correctness, "_poison_cuda", no_cuda)
    poison(torch.device("cpu"), [256, 4096], extra_bytes=1024)
    assert [t.numel() for t in made] == [256] * 3 + [4096] * 3 + [1024]
    assert all(t.device.type == "cpu" and t.dtype == torch.uint8 for t in made)
    assert all(bool((t == 0xFF).all()) for t in made)
    assert torch.isnan(made[0].view(torch.float32)).all()  # the bytes read as NaN in the output's dtype


MIB = 1 << 20


def _segment(address: int, blocks: list[tuple[int, str]], kind: str = "large", device: int = 0) -> dict:
    return {"device": device, "address": address, "segment_type": kind, "total_size": sum(b for b, _ in blocks),
            "blocks": [{"size": size, "state": state} for size, state in blocks]}


def test_poison_finds_every_free_block_of_its_device_and_no_other():
    """CUDA poison fills the allocator's free blocks in place, at the addresses a memory snapshot
    gives (counted from the segment's start when a block has none); a block in use, or one
    awaiting another stream, is left alone, as is another device's memory."""
    snapshot = [
        _segment(1000 * MIB, [(4 * MIB, "active_allocated"), (8 * MIB, "inactive"), (2 * MIB, "active_pending_free"), (6 * MIB, "inactive")]),
        _segment(5000 * MIB, [(2 * MIB, "inactive")], kind="small"),
        _segment(9000 * MIB, [(64 * MIB, "inactive")], device=1),
    ]
    assert free_blocks(snapshot, 0) == [(1004 * MIB, 8 * MIB), (1014 * MIB, 6 * MIB), (5000 * MIB, 2 * MIB)]
    assert free_blocks(snapshot, 1) == [(9000 * MIB, 64 * MIB)]
    given = [{**_segment(0, []), "blocks": [{"size": 4 * MIB, "state": "inactive", "address": 77 * MIB}]}]
    assert free_blocks(given, 0) == [(77 * MIB, 4 * MIB)]  # the snapshot's own address wins


@pytest.mark.parametrize("case", range(12))
def test_the_short_pass_gives_the_full_rules_numbers(case, monkeypatch):
    """judge.correctness._all_close (one short pass per chunk when everything is close) against the
    full rule alone, on outputs close and not, with NaN, Inf, zeros, huge values and several chunks."""
    from kernelwright.judge import correctness

    g = torch.Generator().manual_seed(case)
    n = 3 * 1000 + case
    r = torch.randn(n, generator=g, dtype=torch.float64 if case % 3 == 0 else torch.float32) * (10.0 ** (case % 4 - 1))
    out = (r + torch.randn(n, generator=g, dtype=r.dtype) * 1e-6).to(torch.float16 if case == 5 else r.dtype)
    if case in (1, 7):
        out[17] = r[17] + 1.0  # one element off
    if case in (2, 8):
        r[5], out[5] = float("nan"), float("nan")  # agreeing NaN
    if case in (3, 9):
        r[9], out[9] = float("inf"), float("inf")  # agreeing Inf
    if case in (4, 10):
        r[11], out[11] = float("inf"), 3.0  # the reference infinite, the output not
    if case == 6:
        out[100] = float("nan")
    if case == 11:
        r[:50] = 0.0
        out[:50] = 1e-9
    monkeypatch.setattr(correctness, "CHUNK", 1000)  # several chunks, the last one short
    fast = correctness.compare(r, out, 1e-4, 1e-4)
    monkeypatch.setattr(correctness, "_all_close", lambda *a: False)
    full = correctness.compare(r, out, 1e-4, 1e-4)
    assert fast == full
    assert fast.ok == (case not in (1, 4, 5, 6, 7, 10))  # 5: a float16 output, past 1e-4


def test_the_short_pass_keeps_the_reference_as_it_is():
    from kernelwright.judge import correctness

    r = torch.randn(64, dtype=torch.float64)
    keep = r.clone()
    assert correctness.compare(r, r + 1e-9, 1e-4, 1e-4).ok
    assert torch.equal(r, keep)  # float64 chunks are views of the reference: nothing writes into them


def test_what_poison_relies_on_is_watched_for_replacement(monkeypatch):
    """A candidate that replaces the snapshot poison reads, or its view of a free block, makes
    poison fill nothing: each is among the names the candidate child checks after every call."""
    from kernelwright.judge import correctness, watch

    snapshot = watch.snapshot_identities()
    assert watch.identities_moved(snapshot) == []
    monkeypatch.setattr(correctness._Span, "__init__", lambda self, address, size: None)
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda *a, **k: [])
    monkeypatch.setattr(torch.Tensor, "fill_", lambda self, value: self)
    moved = watch.identities_moved(snapshot)
    assert {"kernelwright.judge.correctness._Span.__init__", "torch.cuda.memory_snapshot", "torch.Tensor.fill_"} <= set(moved)
