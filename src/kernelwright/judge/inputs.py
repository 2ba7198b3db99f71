"""Correctness cases and their inputs, generated identically in every child from (case, seed).

Runs inside judge children only. Imports torch and the standard library.
"""

from __future__ import annotations

import _random
import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
from torch.utils._device import DeviceContext as _DEVICE_CONTEXT  # what `with device:` pushes

from kernelwright.judge import input_digest  # bound at import: a lookup inside the check went through builtins.__import__
from kernelwright.core.records import ASK_SEED, MODULE_MODE, Case  # noqa: F401 - children use inputs.Case
from kernelwright.judge.policy import NEAR_POSITIONS
from kernelwright.problems.sizes import check_applied, sized_code

_T = torch._C.TensorBase  # tensor methods the candidate's objects are given through, never looked up on them

LARGE_SCALE = 100.0  # the "large" distribution: normal samples times this


def import_file(path: str | Path, module_name: str, source: bytes | None = None, size: str = "full") -> ModuleType:
    """Import a Python file as a module under a unique name, with its folder on sys.path.

    The module is compiled from the file's bytes as read now (or from `source`, the bytes the
    caller read and hashed), never from a cached .pyc in __pycache__: bytecode written beside a
    problem by anyone who can write its folder must not change what the judge runs. A problem is
    run at `size` (problems.sizes: full, or the cpu size its file declares)."""
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
        code, overrides = sized_code(text, str(path), size)
        exec(code, module.__dict__)  # noqa: S102 - the problem's (or candidate's) own code, in a child
        check_applied(module, overrides, str(path))
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _to_device(value: Any, device: torch.device) -> Any:
    """Move tensors to the device (keeping their strides); leave other values alone."""
    if isinstance(value, _T) and _DEVICE(value) != device:
        return _T.to(value, device)
    return value


# What the draw of a timed call's inputs runs, bound when a child imports this module, before any
# candidate code: between a timed call's seed and its start nothing may be looked up where the
# candidate could have put code of its own (a module attribute, a class dict, a module's class),
# or that code sees the seed and computes the next answer untimed. Each of these did so: a wrapped
# torch.cuda.is_initialized, random's instance given a class with __setattr__, numpy.random
# behind a proxy module, numpy.__spec__ read by `import numpy`, torch.no_grad.__enter__ wrapped,
# a dtype property added to torch.Tensor, records.Case.__init__ wrapped, and DeviceContext (the
# `with device:` mode) subclassed. What is bound here cannot be swapped; what the problem's own
# get_inputs() reads, and the classes above, window.quiet_window checks before every seed.
_CPU_GENERATOR = torch.default_generator
_GEN_SEED = torch._C.Generator.manual_seed
_RANDOM_INST = random._inst  # type: ignore[attr-defined]
_RANDOM_DICT = vars(_RANDOM_INST)  # its namespace: window.quiet_window checks it is still this one, holding only str keys
_RANDOM_CLASS = random.Random
_RANDOM_SEED = _random.Random.seed  # what random.Random.seed runs for an int, less its `self.gauss_next = None`
_OBJECT_SETATTR = object.__setattr__
try:
    import numpy as _numpy

    _NUMPY_SEED: Any = _numpy.random.seed
    _NUMPY_STATE: Any = _numpy.random.mtrand._rand
    _NUMPY_STATE_CLASS: Any = _numpy.random.RandomState
    _NUMPY_BITGEN: Any = _NUMPY_STATE._bit_generator  # what RandomState.seed seeds (window.quiet_window checks it is still this one)
    _NUMPY_BITGEN_CLASS: Any = _numpy.random.MT19937
except ImportError:  # numpy is optional
    _numpy = None
    _NUMPY_SEED = _NUMPY_STATE = _NUMPY_STATE_CLASS = _NUMPY_BITGEN = _NUMPY_BITGEN_CLASS = None
_TENSOR = torch.Tensor
_DISABLE_TF = torch._C.DisableTorchFunction
_DISABLE_TF_SUBCLASS = torch._C.DisableTorchFunctionSubclass
_DISABLE_DISPATCH = torch._C._DisableTorchDispatch
_TF_LEN, _TF_POP, _TF_PUSH = torch._C._len_torch_function_stack, torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack
_GRAD_ON, _SET_GRAD = torch._C.is_grad_enabled, torch._C._set_grad_enabled
_DTYPE, _SHAPE, _DEVICE = _T.dtype.__get__, _T.shape.__get__, _T.device.__get__  # TensorBase's descriptors, not torch.Tensor's dict
_CUDA_GENERATORS: list[Any] = []  # every CUDA device's default generator, bound by bind_generators


def bind_generators(device: torch.device) -> None:
    """Bind the CUDA generators (CUDA is up in a CUDA child before the candidate's import)."""
    if device.type == "cuda" and not _CUDA_GENERATORS:
        torch.cuda.init()
        _CUDA_GENERATORS.extend(torch.cuda.default_generators)


def _seed_all(seed: int, device: torch.device | None = None) -> None:
    """Seed torch (the CPU generator, and on a CUDA device every CUDA generator), Python's random and
    numpy's global generator, as torch.manual_seed, random.seed and numpy.random.seed do, through
    what was bound at import. Not torch.manual_seed itself: with CUDA not yet up (every draw on the
    CPU backend) it queues the CUDA seeding with a traceback.format_stack() of the caller, which
    raises audit events (sys._getframe, open) inside the draw of a timed call's inputs, where an
    audit hook of the candidate's, which nothing can remove, sees the seed (tests/test_window.py).
    The values drawn are the same."""
    _GEN_SEED(_CPU_GENERATOR, seed)
    if device is not None and device.type == "cuda":
        if _CUDA_GENERATORS:
            for gen in _CUDA_GENERATORS:
                _GEN_SEED(gen, seed)
        else:  # before bind_generators (the reference model's weights in setup)
            torch.cuda.manual_seed_all(seed)
    _RANDOM_SEED(_RANDOM_INST, seed)
    _OBJECT_SETATTR(_RANDOM_INST, "gauss_next", None)
    if _NUMPY_SEED is not None:
        _NUMPY_SEED(seed % 2**32)


def raw_inputs(problem: ModuleType, case: Case, device: torch.device) -> list[Any]:
    """Call get_inputs() or get_test_inputs()[index] under the case's seed, on the device (_draw)."""
    return _draw(problem, case.kind == "extra", case.index, case.seed, device)


def _draw(problem: ModuleType, extra: bool, index: int, seed: int, device: torch.device) -> list[Any]:
    """get_inputs() (or get_test_inputs()[index]) under the seed, on the device, with torch function
    and dispatch modes and subclass handlers off: a mode the candidate left on after its call would
    see the judge's draw of the next inputs, between timed calls (the problem's own code needs
    none). On a CUDA device the draw runs under the
    device's own context (a function mode, of the class bound at import), and on the meta device too
    (judge.problem_meta: a KernelBench input of several GB is then a shape, never drawn); on the CPU under none."""
    left: list[Any] = []  # function modes left on: off the stack for the draw (the device's own context goes on top)
    while _TF_LEN() > 0:
        left.append(_TF_POP())
    try:
        _seed_all(seed, device)
        with _DISABLE_TF_SUBCLASS(), _DISABLE_DISPATCH():
            if device.type in ("cuda", "meta"):
                with _DEVICE_CONTEXT(device):
                    values = list(problem.get_test_inputs()[index] if extra else problem.get_inputs())
            else:
                values = list(problem.get_test_inputs()[index] if extra else problem.get_inputs())
            return [_to_device(v, device) for v in values]
    finally:
        for mode in reversed(left):
            _TF_PUSH(mode)


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


def near_patch(problem: ModuleType, seed: int, device: torch.device) -> list[Any]:
    """What perturb writes for a near case of `seed`: per input position, None or (shape, where,
    values), where `where` are NEAR_POSITIONS positions drawn from the seed and `values` what
    another get_inputs() draw has there. Drawn before the case's own inputs, the other draw is gone
    when they are made: a near case holds one input set, not two (judge.memory). Each draw seeds
    every generator first, so the order changes no value unless get_inputs() keeps state of its
    own between calls (a module-level buffer, a generator it never reseeds); both children draw in
    the same order either way."""
    other = raw_inputs(problem, Case("native", (seed * 2654435761 + 1) % (2**31 - 1) + 1), device)
    patch: list[Any] = []
    with torch.no_grad():
        for i, src in enumerate(other):
            if not (isinstance(src, torch.Tensor) and src.numel() > 0):
                patch.append(None)
                continue
            gen = torch.Generator().manual_seed(seed * 7919 + i + 1)
            flat = torch.randint(src.numel(), (min(NEAR_POSITIONS, src.numel()),), generator=gen)
            where = tuple(w.to(src.device) for w in torch.unravel_index(flat, src.shape))
            got = src[where]  # indexing by positions copies them, except a 0-dim input's, which is a view
            patch.append((tuple(src.shape), where, got.clone() if src.dim() == 0 else got))
    del other
    return patch


def perturb(values: list[Any], patch: list[Any]) -> None:
    """Change a few elements of every floating tensor in place: the positions of near_patch take
    the values another get_inputs() draw has there, so every value stays one the problem produces.
    The tensors keep their identity, data_ptr, shape and most values: a cache keyed on any of
    those, or on one element, replays an answer that is now wrong."""
    with torch.no_grad():
        for i, t in enumerate(values):
            if not (issubclass(type(t), torch.Tensor) and _T.is_floating_point(t) and _T.numel(t) > 0 and i < len(patch)):
                continue
            if patch[i] is None or patch[i][0] != tuple(t.shape):
                continue
            _, where, got = patch[i]
            t[where] = got.to(t.dtype)


def make_inputs(problem: ModuleType, case: Case, device: torch.device) -> list[Any]:
    """The inputs of one correctness case, identical in every process on the same device."""
    if case.kind == "near":
        patch = near_patch(problem, case.seed, device)
        values = raw_inputs(problem, Case("native", case.seed), device)
        perturb(values, patch)
        return values
    values = raw_inputs(problem, case, device)
    apply_distribution(values, case.kind, case.seed)
    return values


def refresh_inputs(problem: ModuleType, pool_entry: list[Any], call_seed: int, device: torch.device) -> None:
    """Make a pool entry hold get_inputs() under call_seed, keeping the tensors' identity: each plain
    tensor lets go of its storage first (release_slot), so the fresh draw can take the allocator's
    block it held and a refresh costs no second input set (judge.memory), then takes the fresh
    tensor's storage (fill_slot). A tensor whose shape, dtype or strides changed, or one that set_
    cannot rebind (a subclass, one that requires grad), falls back: its new values are copied
    in, or the value is replaced. Other values are replaced."""
    dropped: list[Any] = []
    layouts = release_slot(pool_entry)
    fill_slot(problem, pool_entry, layouts, call_seed, device, dropped)
    dropped.clear()


_KEEP: dict[str, Any] = {}  # device -> one empty storage that every released tensor shares, never freed


def _keeper(device: torch.device) -> Any:
    key = str(device)
    kept = _KEEP.get(key)
    if kept is None:
        kept = _KEEP[key] = torch.UntypedStorage(0, device=device)
    return kept


def _rebindable(t: Any) -> bool:
    return type(t) is torch.Tensor and not t.requires_grad and not _T.is_inference(t)


def release_slot(pool_entry: list[Any]) -> list[Any]:
    """The first half of a refresh, before the call's seed is known in this process: every plain
    tensor of the entry lets go of its storage (its layout is returned for fill_slot). It is bound
    to one empty storage the judge keeps for good, so that rebinding it later frees nothing: a weak
    reference callback on a storage or on an output runs when the judge lets go of it, and freed
    after the seed arrived it could compute the next answer there, outside the timed region
    (tests/test_window.py)."""
    # The pool's tensors have been the candidate's arguments: methods through the base class
    # (judge.inputs._form), torch functions off, and only a plain torch.Tensor is written in place;
    # anything else, a tensor whose class the candidate swapped included, is replaced, so no code of
    # its runs here, between timed calls (a swapped class's __torch_function__ could compute the
    # next answer inside copy_, outside the timed region).
    with _DISABLE_TF(), _DISABLE_DISPATCH():
        layouts = [(v.shape, v.dtype, tuple(_T.stride(v))) if _rebindable(v) else None for v in pool_entry]
        with torch.no_grad():
            for v in pool_entry:
                if _rebindable(v):
                    _T.set_(v, _keeper(v.device))  # its storage goes back to the allocator unless something else still holds it
    return layouts


def fill_slot(problem: ModuleType, pool_entry: list[Any], layouts: list[Any], call_seed: int, device: torch.device,
              dropped: list[Any]) -> None:
    """The second half of a refresh: draw get_inputs() under call_seed and put it into the entry.
    Nothing the candidate could have held is freed here: a value replaced goes to `dropped`, which
    the caller empties before the next seed is asked for (asking_getter). Only what was bound at
    import is called (above): the draw's tensors are read through TensorBase, grad mode is set
    through torch._C."""
    fresh = _draw(problem, False, 0, call_seed, device)
    grad = _GRAD_ON()
    _SET_GRAD(False)
    try:
        with _DISABLE_TF(), _DISABLE_DISPATCH():  # else a dispatch mode sees set_ take the fresh draw's storage
            for i, src in enumerate(fresh):
                dst = pool_entry[i] if i < len(pool_entry) else None
                was = layouts[i] if i < len(layouts) else None
                tensor = isinstance(src, _T)
                layout = (_SHAPE(src), _DTYPE(src), tuple(_T.stride(src))) if tensor else None
                same = tensor and type(dst) is _TENSOR and _DTYPE(dst) == layout[1]
                if same and was is not None and was == layout:
                    _T.set_(dst, _T.untyped_storage(src), _T.storage_offset(src), layout[0], layout[2])
                elif same and was is None and _SHAPE(dst) == layout[0] and tuple(_T.stride(dst)) == layout[2]:
                    _T.copy_(dst, src)
                elif i < len(pool_entry):
                    dropped.append(pool_entry[i])
                    pool_entry[i] = src
                else:
                    pool_entry.append(src)
    finally:
        _SET_GRAD(grad)
    dropped.extend(pool_entry[len(fresh):])  # fewer values this time: none of the emptied tensors stays behind
    del pool_entry[len(fresh):]


def make_pool(problem: ModuleType, seeds: list[int], device: torch.device) -> list[list[Any]]:
    """The timing pool: one get_inputs() set per seed (and the empty storage release_slot binds
    made now, not in the first timed call's refresh)."""
    _keeper(device)
    return [raw_inputs(problem, Case("native", s), device) for s in seeds]


def pool_getter(problem: ModuleType, pool: list[list[Any]], calls: list[list[Any]], device: torch.device) -> Callable[[int], list[Any]]:
    """get_args for timing.time_calls: call i uses pool slot calls[i][0], refreshed with the input
    seed calls[i][1] first (None: the slot as it is). Every seed is in this process from the
    start: only for calls that are not timed (the warm-up's rehearsal, tests); a timed batch asks
    for each call's seed in turn (asking_getter)."""
    def get_args(i: int) -> list[Any]:
        slot, seed = calls[i]
        if seed is not None:
            refresh_inputs(problem, pool[slot], seed, device)
        return pool[slot]

    return get_args


ASK = ASK_SEED  # a timed batch's call whose seed the child asks the judge for (calls[i][1])


def asking_getter(problem: ModuleType, pool: list[list[Any]], calls: list[list[Any]], device: torch.device,
                  ask: Callable[[int, list[str]], int], quiet: Callable[[bool, list[Any]], list[str]],
                  dropped: list[Any]) -> Callable[[int], list[Any]]:
    """get_args for a timed batch: call i uses pool slot calls[i][0]; where calls[i][1] is ASK, the
    slot is refreshed with a seed that comes from the judge only now (ask(n, found), n counting the
    asks), after the last call's output and this slot's old storages are gone and `quiet` has
    switched off whatever could run code of the candidate's on this thread and said what it found
    (window.quiet_window), which goes to the judge with the ask. No later call's seed is in
    this process before that call's turn, so code of the candidate's that runs between calls (a
    callback on a freed object, a thread) has no next inputs to work on: with the batch's seeds in
    the command, such code computed the next answer outside the timed region (docs/judge.md,
    "Between timed calls"). `dropped` holds what the refresh replaced until the next call's turn
    (the caller empties it after the batch)."""
    # The getter's state lives in a generator's frame, not in closure cells or a list: code of the
    # candidate's that walked the frames to time_calls' get_args could swap a cell's contents (the
    # ask function, for a wrapper that saw each seed) or put an int subclass in a counter list,
    # whose __add__ ran after the seed. A generator's locals cannot be rebound from Python;
    # get_args is its bound send.
    steps = _asking(problem, pool, calls, device, ask, quiet, dropped)
    next(steps)
    return steps.send


def _asking(problem: ModuleType, pool: list[list[Any]], calls: list[list[Any]], device: torch.device,
            ask: Callable[[int, list[str]], int], quiet: Callable[[bool, list[Any]], list[str]], dropped: list[Any]) -> Any:
    asked = 0  # the judge numbers the asks, not the calls: a call on the pool as it is asks for nothing
    values: list[Any] = []
    while True:
        i = yield values
        slot, seed = calls[i]
        if seed is None:
            values = pool[slot]
            continue
        if seed != ASK:
            raise ValueError(f"a timed call's seed must come from the judge, got {seed!r}")
        values = []
        dropped.clear()  # frees what the last refresh replaced: before any seed is known
        entry, said = pool[slot], []
        if type(entry) is not list:  # a subclass's __getitem__ could read the fresh draw off fill_slot's frame
            said.append("hook: a timing pool entry replaced")
            entry = pool[slot] = []  # the old one is freed now, before the seed
        layouts = release_slot(entry)
        n = asked  # the number the judge checks (an ask out of turn is forged), and the batch's first ask reads the session
        asked = n + 1
        found = said + quiet(n == 0, dropped)
        seed = ask(n, found)
        fill_slot(problem, entry, layouts, seed, device, dropped)
        values = entry


def cycle(pool: list[list[Any]]) -> Callable[[int], list[Any]]:
    """get_args that walks the pool as it is (warm-up)."""
    return lambda i: pool[i % len(pool)]


def init_model(problem: ModuleType, cls: type, seed: int, device: torch.device) -> torch.nn.Module:
    """Construct cls(*get_init_inputs()) under a seed, on the device, in MODULE_MODE."""
    _seed_all(seed, device)
    init = list(problem.get_init_inputs())
    _seed_all(seed, device)
    with device:
        model = cls(*init)
    return model.to(device).train(MODULE_MODE == "train")


def tensor_bytes(values: Any) -> int:
    """Bytes of every tensor in a (nested) value."""
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    return 0


# -- the input check: each input's form and keyed digest (judge.input_digest), no copy of its bytes ----


def input_record(values: list[Any]) -> dict[str, Any]:
    """What changed_inputs needs to tell whether a call changed its inputs: each tensor's type,
    shape, dtype, strides and keyed digest, under a key drawn now."""
    import secrets

    key = secrets.randbits(62)
    return {"key": key, "items": [_form(v) + (input_digest.keyed(v, key, i),) if issubclass(type(v), torch.Tensor) else None for i, v in enumerate(values)]}


def _form(t: torch.Tensor) -> tuple[Any, ...]:
    """Class, shape, dtype, strides and the lazy conjugate and negative bits (a flipped bit changes
    the values without a byte). shape and dtype are data descriptors
    of the base class, which an attribute set on the object cannot shadow; the methods are called
    through it (an input's own `x.stride = ...` or `x.detach = ...` is not the judge's)."""
    return (type(t), tuple(t.shape), t.dtype, tuple(_T.stride(t)), _T.is_conj(t), _T.is_neg(t))


def changed_inputs(record: dict[str, Any], after: list[Any]) -> list[int]:
    """Positions of tensor inputs whose class, shape, dtype, strides or bytes changed since
    input_record (a class swapped onto an input, x.__class__ = Sub, could answer for itself)."""
    changed = []
    for i, (was, b) in enumerate(zip(record["items"], after)):
        if was is None:
            continue
        if not issubclass(type(b), torch.Tensor) or _form(b) != was[:-1] or input_digest.keyed(b, record["key"], i) != was[-1]:
            changed.append(i)
    return changed
