"""The op audit's allow-list: which ATen operators a candidate's forward may run without computing.

A candidate is judged on its own kernels. One forward runs under a dispatch mode in the candidate
child (child_candidate.audit) that counts every ATen operator it reaches, from Python and from C++
extension code alike; the judge then refuses operators outside this list unless the policy allows
torch compute. Allowed: allocation (constant fills included), views and layout copies, and
metadata queries. Everything else (`F.*`, tensor methods, `@`, `torch.ops.aten.*`, copies that
convert dtype or device) is compute. Custom operators (`torch.library`) count as compute too: the
audit cannot see inside them.
"""

from __future__ import annotations

ALLOCATION = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
    "aten::zeros", "aten::zeros_like", "aten::new_zeros", "aten::zero_", "aten::ones", "aten::ones_like",
    "aten::new_ones", "aten::full", "aten::full_like", "aten::new_full", "aten::fill_", "aten::arange",
}
VIEWS = {
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::as_strided", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice",
    "aten::narrow", "aten::detach", "aten::alias", "aten::split", "aten::split_with_sizes", "aten::chunk",
    "aten::unbind", "aten::flatten", "aten::unflatten", "aten::view_as", "aten::expand_as", "aten::lift_fresh",
    "aten::contiguous", "aten::clone", "aten::copy_", "aten::_reshape_alias", "aten::_to_copy",
    # composite views: the dispatch mode sees what they decompose into, or nothing when they return
    # their input unchanged (movedim(x, 0, 0)); listed so the profiler's cross-check knows them
    "aten::movedim", "aten::moveaxis", "aten::swapaxes", "aten::swapdims", "aten::mT", "aten::mH", "aten::adjoint",
    "aten::numpy_T", "aten::matrix_H", "aten::ravel", "aten::diagonal", "aten::unfold", "aten::view_as_real",
    "aten::view_as_complex",
}  # copy_ and _to_copy only as layout copies: audit_name renames a conversion of dtype or device
METADATA = {
    "aten::is_contiguous", "aten::sym_size", "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset",
    "aten::size", "aten::stride", "aten::numel", "aten::dim", "aten::is_same_size", "aten::_local_scalar_dense",
    "aten::record_stream", "aten::set_",
}
ALLOWED = ALLOCATION | VIEWS | METADATA
# Names the profiler records for allowed operations whose dispatched form is in the lists above.
PROFILER_ALIASES = {"aten::to", "aten::item", "aten::type_as", "aten::resolve_conj", "aten::resolve_neg", "aten::reshape_as"}


def audit_name(name: str, args: tuple, kwargs: dict) -> str:
    """The name the audit records: a copy that converts dtype or device is compute and says so
    (`aten::copy_[convert]`); a copy that only changes the layout keeps its name."""
    import torch

    base = base_name(name)
    if base == "aten::copy_" and len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2]):
        if args[0].dtype != args[1].dtype or args[0].device != args[1].device:
            return f"{name}[convert]"
    if base == "aten::_to_copy" and args and isinstance(args[0], torch.Tensor):
        src = args[0]
        if kwargs.get("dtype", src.dtype) != src.dtype or torch.device(kwargs.get("device") or src.device) != src.device:
            return f"{name}[convert]"
    return name


def base_name(op: str) -> str:
    """'aten::empty.memory_format' -> 'aten::empty'."""
    return op.split(".", 1)[0]


def disallowed(ops: dict[str, int]) -> dict[str, int]:
    """The operators (with counts) that are torch compute: what the dispatch mode counted outside
    the allow-list, and what the profiler recorded that the mode did not see (hidden_from_mode)."""
    mode, _ = split_profiled(ops)
    found = {op: n for op, n in sorted(mode.items()) if base_name(op) not in ALLOWED or op.endswith("[convert]")}
    found.update({f"{op}[unseen by the mode]": n for op, n in hidden_from_mode(ops).items()})
    return found


def split_profiled(ops: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(operators the dispatch mode counted, top-level operators the profiler recorded), from the
    audit's counts, where the profiler's carry the prefix "profiled:"."""
    mode = {op: n for op, n in ops.items() if not op.startswith("profiled:")}
    prof = {op[len("profiled:"):]: n for op, n in ops.items() if op.startswith("profiled:")}
    return mode, prof


def hidden_from_mode(ops: dict[str, int]) -> dict[str, int]:
    """Top-level operators the profiler recorded, none of whose work reached the dispatch mode
    (the child marks those), that are not allocation, views or metadata: work run with the mode
    switched off."""
    _, prof = split_profiled(ops)
    return {op: n for op, n in sorted(prof.items()) if base_name(op) not in ALLOWED | PROFILER_ALIASES}


def describe(ops: dict[str, int], limit: int = 12) -> str:
    """'aten::mm x2, aten::add x1' (the first `limit`)."""
    items = [f"{op} x{n}" for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))]
    return ", ".join(items[:limit]) + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")
