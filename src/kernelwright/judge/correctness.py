"""The one correctness function: compare a candidate's output with the reference's.

Runs in the reference child (which never runs candidate code). Tolerance rule: an element is
right when |c - r| <= atol * s + rtol * |r|, with s = max(1, rms of the finite reference values),
so that atol keeps its meaning for outputs of any magnitude. Non-finite values must agree exactly.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any

import torch

from kernelwright.judge.memory import COMPARE_CHUNK, comparison_chunk

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
    t = type(out)
    name = "torch.Tensor" if t is torch.Tensor else f"{t.__module__}.{t.__qualname__}"
    if not isinstance(out, torch.Tensor):
        return check_described(ref, _Described(name, False), strict)
    return check_described(ref, _Described(name, True, tuple(out.shape), out.dtype, out.numel()), strict)


@dataclass(frozen=True)
class _Described:
    type_name: str
    is_tensor: bool
    shape: tuple[int, ...] = ()
    dtype: Any = None
    n: int = 0

    def numel(self) -> int:
        return self.n


def check_described(ref: torch.Tensor, item: Any, strict: bool) -> str:
    """The type, shape and dtype checks on an output's description (judge.handover.Item, or
    check_output's of a tensor in hand): a message, empty when the output is acceptable."""
    if strict and item.type_name != "torch.Tensor":
        return f"output must be exactly torch.Tensor, got {item.type_name}"
    if not item.is_tensor:
        return f"output is not a tensor: {item.type_name}"
    if tuple(item.shape) != tuple(ref.shape):
        if strict or item.numel() != ref.numel():
            return f"shape {tuple(item.shape)} differs from the reference's {tuple(ref.shape)}"
    if strict and item.dtype != ref.dtype:
        return f"dtype {item.dtype} differs from the reference's {ref.dtype}"
    if item.dtype.is_complex != ref.dtype.is_complex:
        return f"dtype {item.dtype} differs from the reference's {ref.dtype} (complex against real)"
    return ""


CHUNK = COMPARE_CHUNK  # elements compared at a time, at most (judge.memory, which says why; tests set a smaller one)


def chunk_elements(n: int) -> int:
    """Elements compared at a time in an output of n elements (judge.memory counts 64 bytes each)."""
    return comparison_chunk(n, CHUNK)


def compare(ref: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> Comparison:
    """Compare out with ref elementwise: exactly for integer and bool outputs, under the tolerance
    rule of this module for floating ones (complex ones as their real and imaginary parts). Works
    through the elements chunk_elements(n) at a time, so that its memory stays a fraction of the
    output's and never passes CHUNK elements' worth."""
    if ref.is_complex():
        ref = torch.view_as_real(ref.detach().resolve_conj())
        out = torch.view_as_real(out.detach().to(ref.device).resolve_conj()) if out.is_complex() else out
    exact = not (ref.is_floating_point() or ref.is_complex())
    r_all = ref.detach().reshape(-1)
    c_all = out.detach().reshape(-1)
    n = r_all.numel()
    if n == 0:
        return Comparison(True, 0.0, 0.0, 0, 0, "")
    step = chunk_elements(n)
    scale = 1.0 if exact or atol <= 0 else _rms(r_all, step)
    tally = _Tally()
    for start in range(0, n, step):
        if exact:  # integers and booleans: equal in the reference's own dtype (no float64 detour past 2**53)
            r_own, c_own = r_all[start:start + step], c_all[start:start + step].to(device=ref.device, dtype=ref.dtype)
            bad = r_own != c_own
            r, c = r_own.to(torch.float64), c_own.to(torch.float64)
            err = (r - c).abs()
            tally.add(start, r, c, bad, torch.zeros_like(bad), err, err)
            continue
        r = r_all[start:start + step].to(torch.float64)
        c = c_all[start:start + step].to(device=r.device, dtype=torch.float64)
        if _all_close(r, c, atol * scale, rtol, tally):
            continue
        fin_r, fin_c = torch.isfinite(r), torch.isfinite(c)
        both = fin_r & fin_c
        allowed = atol * scale + rtol * r.abs()
        err = torch.where(both, (c - r).abs(), torch.zeros_like(r))
        same_nonfinite = (torch.isnan(r) & torch.isnan(c)) | (r == c)
        nonfinite_bad = ~both & ~same_nonfinite
        bad = (both & (err > allowed)) | nonfinite_bad
        rel = torch.where(both, err / torch.clamp(r.abs(), min=max(atol * scale, 1e-30)), torch.zeros_like(r))  # NaN never hides the worst
        tally.add(start, r, c, bad, nonfinite_bad, err, rel)
        del r, c, fin_r, fin_c, both, allowed, err, same_nonfinite, nonfinite_bad, bad, rel
    if tally.n_bad == 0:
        return Comparison(True, tally.max_abs, 0.0 if exact else tally.max_rel, 0, n, "")
    if exact:
        return Comparison(False, tally.max_abs, tally.max_abs, tally.n_bad, n, tally.message(ref.shape, n, None))
    return Comparison(False, tally.max_abs, tally.max_rel, tally.n_bad, n, tally.message(ref.shape, n, (atol, rtol, scale)))


def _all_close(r: torch.Tensor, c: torch.Tensor, atol_scaled: float, rtol: float, tally: "_Tally") -> bool:
    """The common chunk in a third of the kernels and one synchronisation: when every element of
    the reference is finite and every output element within its tolerance, add the chunk's
    largest errors to the tally and say True; otherwise add nothing (the full rule below runs,
    NaN, Inf and the message included). Same numbers as the full rule: the same operations on
    the same values (a sum's order aside, which IEEE addition of two terms does not have)."""
    d = (c - r).abs_()
    ra = r.abs()
    allowed = ra.mul(rtol).add_(atol_scaled)  # not finite where the reference is not (or rtol x |r| overflows)
    ok = d.le(allowed).logical_and_(torch.isfinite(allowed))  # d <= allowed (finite): the output element is finite too
    rel = d / ra.clamp_(min=max(atol_scaled, 1e-30))
    every, max_abs, max_rel = torch.stack([ok.all().to(torch.float64), d.max(), rel.max()]).tolist()
    if not every:
        return False
    tally.max_abs = max(tally.max_abs, max_abs)
    tally.max_rel = max(tally.max_rel, max_rel)
    return True


class _Tally:
    """What the chunks of one comparison add up to."""

    def __init__(self) -> None:
        self.n_bad = 0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.first: list[tuple[int, float, float]] = []  # (flat index, got, expected), the first FIRST_INDICES bad ones
        self.n_nonfinite = self.n_nan_c = self.n_inf_c = 0

    def add(self, start: int, r: torch.Tensor, c: torch.Tensor, bad: torch.Tensor, nonfinite_bad: torch.Tensor,
            err: torch.Tensor, rel: torch.Tensor) -> None:
        self.max_abs = max(self.max_abs, float(err.max()))
        self.max_rel = max(self.max_rel, float(rel.max()))
        n_bad = int(bad.sum())
        if not n_bad:
            return
        self.n_bad += n_bad
        if len(self.first) < FIRST_INDICES:
            for i in torch.nonzero(bad).reshape(-1)[:FIRST_INDICES - len(self.first)].tolist():
                self.first.append((start + i, float(c[i]), float(r[i])))
        n_nonfinite = int(nonfinite_bad.sum())
        if n_nonfinite:
            self.n_nonfinite += n_nonfinite
            self.n_nan_c += int((nonfinite_bad & torch.isnan(c)).sum())
            self.n_inf_c += int((nonfinite_bad & torch.isinf(c)).sum())

    def message(self, shape: Any, n: int, tol: tuple[float, float, float] | None) -> str:
        where = ", ".join(f"{_unravel(i, tuple(shape))}: got {got:.6g}, expected {want:.6g}" for i, got, want in self.first)
        rule = "(must match exactly)" if tol is None else f"(atol={tol[0]:g} x scale {tol[2]:.4g}, rtol={tol[1]:g})"
        text = f"{self.n_bad} of {n} elements differ {rule}; first: {where}"
        if self.n_nonfinite:
            text += f"; NaN/Inf disagreements: {self.n_nonfinite} ({self.n_nan_c} NaN and {self.n_inf_c} Inf in the output)"
        return text


def _rms(values: torch.Tensor, step: int) -> float:
    """max(1, root mean square of the finite values), step elements at a time."""
    total, count = 0.0, 0
    for start in range(0, values.numel(), step):
        v = values[start:start + step].to(torch.float64)
        whole = float(v.square().sum())  # finite only when every value is (and none squares past float64)
        if math.isfinite(whole):
            total, count = total + whole, count + v.numel()
            continue
        fin = torch.isfinite(v)
        total += float(torch.where(fin, v, torch.zeros_like(v)).square().sum())
        count += int(fin.sum())
    if count == 0:
        return 1.0
    return max(1.0, (total / count) ** 0.5)


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
    """Fill memory the allocator will hand out next with NaN bytes (0xFF).

    On CUDA a block of each output's size is allocated (all held at once) and freed, then every free
    block the caching allocator holds is filled in place (free_blocks), the outputs' own blocks
    included: no memory beyond the cache and the outputs' sizes (judge.memory). Elsewhere blocks of exactly the outputs' sizes are allocated, filled and freed,
    three of each, which catches the blocks the candidate freed, with `extra_bytes` more.
    """
    if device.type == "cuda":
        _poison_cuda(device, byte_sizes)
    else:
        _poison_by_allocation(device, byte_sizes, extra_bytes)


POISON_EXTRA_MAX = 1 << 30  # the extra block of the allocating way on a GPU, at most


def _poison_by_allocation(device: torch.device, byte_sizes: list[int], extra_bytes: int) -> None:
    held = []
    for size in byte_sizes:
        for _ in range(3):
            held.append(torch.full((max(1, size),), 0xFF, dtype=torch.uint8, device=device))
    if extra_bytes > 0:
        held.append(torch.full((extra_bytes,), 0xFF, dtype=torch.uint8, device=device))
    del held


class _Span:
    """A view of device memory the caching allocator holds free, for torch.as_tensor (the CUDA
    array interface): the tensor made from it owns nothing, so nothing is allocated or freed."""

    def __init__(self, address: int, size: int) -> None:
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}


def free_blocks(segments: list[dict[str, Any]], device_index: int) -> list[tuple[int, int]]:
    """(address, bytes) of every free block in a torch.cuda.memory_snapshot()
    on one device. A block still awaiting another stream's use is not free and is left alone
    (_poison_cuda allocates first, which settles the ones whose streams have finished)."""
    found = []
    for seg in segments:
        if int(seg.get("device", device_index)) != device_index:
            continue
        address = int(seg["address"])
        for block in seg.get("blocks", []):
            size = int(block["size"])
            if block.get("state") == "inactive" and size > 0:
                found.append((int(block.get("address", address)), size))
            address += size
    return found


def _poison_cuda(device: torch.device, byte_sizes: list[int]) -> None:
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.synchronize(device)
    # a block of each output's size, all held at once, then freed: the allocation makes the allocator
    # settle frees pending on other streams (record_stream), each output has a free block of its own,
    # and a new segment's rest is free too; the fill below covers all of them
    held = [torch.empty((max(1, size),), dtype=torch.uint8, device=device) for size in byte_sizes]
    del held
    free = free_blocks(torch.cuda.memory_snapshot(), index)
    try:
        for address, size in free:
            torch.as_tensor(_Span(address, size), device=device).fill_(0xFF)
    except RuntimeError as exc:  # torch reads the array interface with numpy: without it, the old way
        if "numpy" not in str(exc).lower():
            raise
        _poison_by_allocation(device, byte_sizes, min(POISON_EXTRA_MAX, torch.cuda.mem_get_info(device)[0] // 4))
    torch.cuda.synchronize(device)  # filled before any stream of the candidate's is handed a block
