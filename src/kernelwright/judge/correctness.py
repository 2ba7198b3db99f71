"""The one correctness function: compare a candidate's output with the reference's.

Runs in the reference child (which never runs candidate code). Tolerance rule: an element is
right when |c - r| <= atol * s + rtol * |r|, with s = max(1, rms of the finite reference values),
so that atol keeps its meaning for outputs of any magnitude. Non-finite values must agree exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

FIRST_INDICES = 5  # how many mismatching positions a message names


@dataclass(frozen=True)
class Comparison:
    """The result of comparing one output with its reference."""

    ok: bool  # every element within tolerance and non-finite values agreeing
    max_abs_error: float | None  # worst |c - r| over finite pairs; None when not comparable
    max_rel_error: float | None  # worst |c - r| / max(|r|, atol * s); None when not comparable
    n_bad: int  # elements out of tolerance
    n_total: int  # elements compared
    message: str  # empty when ok; else counts, first indices and NaN/Inf disagreements

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def as_output_list(value: Any) -> list[Any]:
    """A model's output as a list (a single tensor, or the items of a tuple or list)."""
    if isinstance(value, (tuple, list)):
        return list(value)
    return [value]


def check_output(ref: torch.Tensor, out: Any, strict: bool) -> str:
    """Type, shape and dtype checks; returns a message, empty when the output is acceptable."""
    if strict and type(out) is not torch.Tensor:
        return f"output must be exactly torch.Tensor, got {type(out).__module__}.{type(out).__qualname__}"
    if not isinstance(out, torch.Tensor):
        return f"output is not a tensor: {type(out).__qualname__}"
    if tuple(out.shape) != tuple(ref.shape):
        if strict or out.numel() != ref.numel():
            return f"shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}"
    if strict and out.dtype != ref.dtype:
        return f"dtype {out.dtype} differs from the reference's {ref.dtype}"
    return ""


def compare(ref: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> Comparison:
    """Compare out with ref elementwise: exactly for integer and bool outputs, under the tolerance
    rule of this module for floating ones (complex ones as their real and imaginary parts)."""
    if ref.is_complex():
        ref = torch.view_as_real(ref.detach().resolve_conj())
        out = torch.view_as_real(out.detach().to(ref.device).resolve_conj()) if out.is_complex() else out
    if not (ref.is_floating_point() or ref.is_complex()):
        return _compare_exact(ref, out)
    r = ref.detach().to(torch.float64).reshape(-1)
    c = out.detach().to(device=ref.device, dtype=torch.float64).reshape(-1)
    n = r.numel()
    if n == 0:
        return Comparison(True, 0.0, 0.0, 0, 0, "")
    fin_r, fin_c = torch.isfinite(r), torch.isfinite(c)
    both = fin_r & fin_c
    scale = _rms(r[fin_r]) if atol > 0 else 1.0
    allowed = atol * scale + rtol * r.abs()
    err = torch.where(both, (c - r).abs(), torch.zeros_like(r))
    same_nonfinite = (torch.isnan(r) & torch.isnan(c)) | (r == c)
    nonfinite_bad = ~both & ~same_nonfinite
    bad = (both & (err > allowed)) | nonfinite_bad
    n_bad = int(bad.sum())
    max_abs = float(err.max())
    max_rel = float((err / torch.clamp(r.abs(), min=max(atol * scale, 1e-30))).max())
    message = "" if n_bad == 0 else _mismatch_message(ref.shape, r, c, bad, nonfinite_bad, n_bad, atol, rtol, scale)
    return Comparison(n_bad == 0, max_abs, max_rel, n_bad, n, message)


def _compare_exact(ref: torch.Tensor, out: torch.Tensor) -> Comparison:
    """Integers and booleans: equal in the reference's own dtype (no float64 detour past 2**53)."""
    r = ref.detach().reshape(-1)
    c = out.detach().to(device=ref.device, dtype=ref.dtype).reshape(-1)
    bad = r != c
    n_bad = int(bad.sum())
    diff = (r.to(torch.float64) - c.to(torch.float64)).abs()
    max_abs = float(diff.max()) if r.numel() else 0.0
    if n_bad == 0:
        return Comparison(True, max_abs, 0.0, 0, r.numel(), "")
    none = torch.zeros_like(bad)
    message = _mismatch_message(ref.shape, r.to(torch.float64), c.to(torch.float64), bad, none, n_bad, 0.0, 0.0, 1.0)
    return Comparison(False, max_abs, max_abs, n_bad, r.numel(), message.replace("(atol=0 x scale 1, rtol=0)", "(must match exactly)"))


def _rms(values: torch.Tensor) -> float:
    if values.numel() == 0:
        return 1.0
    return max(1.0, float(values.square().mean().sqrt()))


def _mismatch_message(shape, r, c, bad, nonfinite_bad, n_bad, atol, rtol, scale) -> str:
    flat = torch.nonzero(bad).reshape(-1)[:FIRST_INDICES].tolist()
    where = ", ".join(
        f"{_unravel(i, tuple(shape))}: got {float(c[i]):.6g}, expected {float(r[i]):.6g}" for i in flat
    )
    n_nonfinite = int(nonfinite_bad.sum())
    text = (
        f"{n_bad} of {r.numel()} elements differ (atol={atol:g} x scale {scale:.4g}, rtol={rtol:g}); "
        f"first: {where}"
    )
    if n_nonfinite:
        n_nan_c = int((nonfinite_bad & torch.isnan(c)).sum())
        n_inf_c = int((nonfinite_bad & torch.isinf(c)).sum())
        text += f"; NaN/Inf disagreements: {n_nonfinite} ({n_nan_c} NaN and {n_inf_c} Inf in the output)"
    return text


def _unravel(index: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for dim in reversed(shape or (1,)):
        out.append(index % dim)
        index //= dim
    return list(reversed(out))


def compare_outputs(refs: list[torch.Tensor], outs: list[Any], atol: float, rtol: float, strict: bool,
                    per_output: list[tuple[float, float]] | None = None) -> Comparison:
    """Compare every output of a model (with per_output[k] = (atol, rtol) when given); the first
    failing one decides the message."""
    if len(outs) != len(refs):
        return Comparison(False, None, None, 0, 0, f"{len(outs)} outputs, expected {len(refs)}")
    worst_abs, worst_rel, total = 0.0, 0.0, 0
    for k, (ref, out) in enumerate(zip(refs, outs)):
        problem = check_output(ref, out, strict)
        if problem:
            return Comparison(False, None, None, 0, ref.numel(), f"output {k}: {problem}")
        a, r = per_output[k] if per_output and k < len(per_output) else (atol, rtol)
        result = compare(ref, out, a, r)
        if not result.ok:
            prefix = f"output {k}: " if len(refs) > 1 else ""
            return Comparison(False, result.max_abs_error, result.max_rel_error, result.n_bad, result.n_total, prefix + result.message)
        worst_abs, worst_rel = max(worst_abs, result.max_abs_error), max(worst_rel, result.max_rel_error)
        total += result.n_total
    return Comparison(True, worst_abs, worst_rel, 0, total, "")


def poison(device: torch.device, byte_sizes: list[int], extra_bytes: int = 0) -> None:
    """Fill memory the allocator will hand out next with NaN bytes (0xFF), then free it.

    Allocating blocks of exactly the sizes the candidate will allocate (its outputs) catches the
    blocks it freed; an extra large block covers the rest of the cache on the GPU.
    """
    held = []
    for size in byte_sizes:
        for _ in range(3):
            held.append(torch.full((max(1, size),), 0xFF, dtype=torch.uint8, device=device))
    if extra_bytes > 0:
        held.append(torch.full((extra_bytes,), 0xFF, dtype=torch.uint8, device=device))
    del held
