"""Correctness cases and their inputs, generated identically in every child from (case, seed).

Runs inside judge children only. Imports torch and the standard library.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from kernelwright.judge.records import Case  # noqa: F401 - children use inputs.Case
from kernelwright.judge.policy import NEAR_POSITIONS

LARGE_SCALE = 100.0  # the "large" distribution: normal samples times this


def import_file(path: str | Path, module_name: str, source: bytes | None = None) -> ModuleType:
    """Import a Python file as a module under a unique name, with its folder on sys.path.

    The module is compiled from the file's bytes as read now (or from `source`, the bytes the
    caller read and hashed), never from a cached .pyc in __pycache__: bytecode written beside a
    problem by anyone who can write its folder must not change what the judge runs."""
    path = Path(path).resolve()
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    text = path.read_bytes() if source is None else source
    module = ModuleType(module_name)
    module.__file__ = str(path)
    module.__spec__ = importlib.util.spec_from_loader(module_name, loader=None, origin=str(path))
    sys.modules[module_name] = module
    try:
        exec(compile(text, str(path), "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - the problem's (or candidate's) own code, in a child
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _to_device(value: Any, device: torch.device) -> Any:
    """Move tensors to the device (keeping their strides); leave other values alone."""
    if isinstance(value, torch.Tensor) and value.device != device:
        return value.to(device)
    return value


def _seed_all(seed: int) -> None:
    """Seed torch (CPU and every CUDA generator), Python's random and numpy's global generator."""
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass


def raw_inputs(problem: ModuleType, case: Case, device: torch.device) -> list[Any]:
    """Call get_inputs() or get_test_inputs()[index] under the case's seed, on the device."""
    _seed_all(case.seed)
    with device:
        if case.kind == "extra":
            values = list(problem.get_test_inputs()[case.index])
        else:
            values = list(problem.get_inputs())
    return [_to_device(v, device) for v in values]


SAMPLE_CHUNK = 1 << 24  # elements sampled at a time: a distribution costs no more than 64 MiB beyond its tensor


def apply_distribution(values: list[Any], kind: str, seed: int) -> None:
    """Overwrite every floating tensor in place with samples of the named distribution, drawn in
    float32 SAMPLE_CHUNK elements at a time (the same draws in every process on the device), so
    that a multi-GiB input needs no multi-GiB temporaries."""
    if kind in ("native", "extra"):
        return
    for i, t in enumerate(values):
        if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
            continue
        gen = torch.Generator(device=t.device).manual_seed(seed * 7919 + i)
        flat = t.view(-1) if t.is_contiguous() else None
        n = t.numel()
        if flat is None:  # a strided input: sampled whole, then written through its strides
            t.copy_(_sample(kind, n, gen, t.device).view(t.shape).to(t.dtype))
            continue
        for start in range(0, n, SAMPLE_CHUNK):
            flat[start:start + SAMPLE_CHUNK].copy_(_sample(kind, min(SAMPLE_CHUNK, n - start), gen, t.device))


def _sample(kind: str, n: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    if kind == "uniform":
        return torch.rand(n, generator=gen, device=device, dtype=torch.float32).mul_(2).sub_(1)
    sample = torch.randn(n, generator=gen, device=device, dtype=torch.float32)
    return sample.mul_(LARGE_SCALE) if kind == "large" else sample


def perturb(problem: ModuleType, values: list[Any], seed: int, device: torch.device) -> None:
    """Change a few elements of every floating tensor in place: NEAR_POSITIONS positions drawn
    from the seed take the values another get_inputs() draw has there, so every value stays one
    the problem produces. The tensors keep their identity, data_ptr, shape and most values: a
    cache keyed on any of those, or on one element, replays an answer that is now wrong."""
    other = raw_inputs(problem, Case("native", (seed * 2654435761 + 1) % (2**31 - 1) + 1), device)
    with torch.no_grad():
        for i, t in enumerate(values):
            if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0 and i < len(other)):
                continue
            src = other[i]
            if not (isinstance(src, torch.Tensor) and src.shape == t.shape):
                continue
            gen = torch.Generator().manual_seed(seed * 7919 + i + 1)
            flat = torch.randint(t.numel(), (min(NEAR_POSITIONS, t.numel()),), generator=gen)
            where = torch.unravel_index(flat, t.shape)
            where = tuple(w.to(t.device) for w in where)
            t[where] = src[where].to(t.dtype)


def make_inputs(problem: ModuleType, case: Case, device: torch.device) -> list[Any]:
    """The inputs of one correctness case, identical in every process on the same device."""
    if case.kind == "near":
        values = raw_inputs(problem, Case("native", case.seed), device)
        perturb(problem, values, case.seed, device)
        return values
    values = raw_inputs(problem, case, device)
    apply_distribution(values, case.kind, case.seed)
    return values


def refresh_inputs(problem: ModuleType, pool_entry: list[Any], call_seed: int, device: torch.device) -> None:
    """Make a pool entry hold get_inputs() under call_seed: tensor values are written in place
    (keeping the tensors' identity); other values, or tensors whose shape or layout changed, are
    replaced."""
    fresh = raw_inputs(problem, Case("native", call_seed), device)
    for i, src in enumerate(fresh):
        dst = pool_entry[i] if i < len(pool_entry) else None
        same_layout = isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and (
            dst.shape == src.shape and dst.dtype == src.dtype and dst.stride() == src.stride())
        if same_layout:
            dst.copy_(src)
        elif i < len(pool_entry):
            pool_entry[i] = src
        else:
            pool_entry.append(src)


def make_pool(problem: ModuleType, seeds: list[int], device: torch.device) -> list[list[Any]]:
    """The timing pool: one get_inputs() set per seed."""
    return [raw_inputs(problem, Case("native", s), device) for s in seeds]


def pool_getter(problem: ModuleType, pool: list[list[Any]], calls: list[list[Any]], device: torch.device) -> Callable[[int], list[Any]]:
    """get_args for timing.time_calls: call i uses pool slot calls[i][0], refreshed with the input
    seed calls[i][1] first (None: the slot as it is)."""
    def get_args(i: int) -> list[Any]:
        slot, seed = calls[i]
        if seed is not None:
            refresh_inputs(problem, pool[slot], seed, device)
        return pool[slot]

    return get_args


def cycle(pool: list[list[Any]]) -> Callable[[int], list[Any]]:
    """get_args that walks the pool as it is (warm-up)."""
    return lambda i: pool[i % len(pool)]


def init_model(problem: ModuleType, cls: type, seed: int, device: torch.device) -> torch.nn.Module:
    """Construct cls(*get_init_inputs()) under a seed, on the device, in eval mode."""
    _seed_all(seed)
    init = list(problem.get_init_inputs())
    _seed_all(seed)
    with device:
        model = cls(*init)
    return model.to(device).eval()


def tensor_bytes(values: Any) -> int:
    """Bytes of every tensor in a (nested) value."""
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    return 0


def clone_tensors(values: list[Any]) -> list[Any]:
    """Bitwise copies of the tensors in a list (other values as they are)."""
    return [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values]


def changed_inputs(before: list[Any], after: list[Any]) -> list[int]:
    """Positions of tensor inputs whose bytes changed."""
    changed = []
    for i, (a, b) in enumerate(zip(before, after)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            # a class swapped onto the input (x.__class__ = Sub) could answer the comparison itself
            same = type(b) is type(a) and a.shape == b.shape and a.dtype == b.dtype and _bitwise_equal(a, b)
            if not same:
                changed.append(i)
    return changed


EQUAL_CHUNK = 1 << 25  # bytes compared at a time: torch.equal's temporaries stay at 32 MiB (256 MiB at 1 << 28, the
# candidate child's largest block beside the inputs, their copy and the output until 2026-12-04; a chunk is one sync)


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0:
        return True
    # flat first: a 0-dim tensor, or one whose size-1 last dimension has a stride other than 1 (which
    # contiguous() leaves as it is), cannot be viewed as bytes, and an honest candidate failed on it
    a_f, b_f = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    if a.is_floating_point() or a.is_complex():
        a_f, b_f = a_f.view(torch.uint8), b_f.view(torch.uint8)
    step = max(1, EQUAL_CHUNK // a_f.element_size())
    return all(bool(torch.equal(a_f[i:i + step], b_f[i:i + step])) for i in range(0, a_f.numel(), step))
