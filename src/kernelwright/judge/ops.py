"""The op audit's allow-list: which ATen operators a candidate's forward may run without computing.

A candidate is judged on its own kernels. One forward runs under a dispatch mode in the candidate
child (child_candidate.audit) that counts every ATen operator it reaches, from Python and from C++
extension code alike; the judge then refuses operators outside this list unless the policy allows
torch compute. Allowed: allocation, views and layout copies, and metadata queries. Everything else
(`F.*`, tensor methods, `@`, `torch.ops.aten.*`, dtype conversions) is compute.
"""

from __future__ import annotations

ALLOCATION = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
    "aten::zeros", "aten::zeros_like", "aten::new_zeros", "aten::zero_",
}
VIEWS = {
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::as_strided", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice",
    "aten::narrow", "aten::detach", "aten::alias", "aten::split", "aten::split_with_sizes", "aten::chunk",
    "aten::unbind", "aten::flatten", "aten::unflatten", "aten::view_as", "aten::expand_as", "aten::lift_fresh",
    "aten::contiguous", "aten::clone", "aten::copy_", "aten::_reshape_alias",
}
METADATA = {
    "aten::is_contiguous", "aten::sym_size", "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset",
    "aten::size", "aten::stride", "aten::numel", "aten::dim", "aten::is_same_size", "aten::_local_scalar_dense",
    "aten::record_stream", "aten::set_",
}
ALLOWED = ALLOCATION | VIEWS | METADATA


def base_name(op: str) -> str:
    """'aten::empty.memory_format' -> 'aten::empty'."""
    return op.split(".", 1)[0]


def disallowed(ops: dict[str, int]) -> dict[str, int]:
    """The operators (with counts) that are torch compute."""
    return {op: n for op, n in sorted(ops.items()) if base_name(op) not in ALLOWED}


def describe(ops: dict[str, int], limit: int = 12) -> str:
    """'aten::mm x2, aten::add x1' (the first `limit`)."""
    items = [f"{op} x{n}" for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))]
    return ", ".join(items[:limit]) + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")
