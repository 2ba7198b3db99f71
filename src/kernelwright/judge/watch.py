"""What a judge child records before the candidate's import and checks after it and after every
call (guards function_identities and numerics_flags): the numerics flags, the identities of the
watched functions (torch's, the standard library's, the judge's own) with what each runs and the
state of the judge's modules, and the dispatcher's kernels for the operators the judge's own code
reaches.
"""

from __future__ import annotations

import builtins
import itertools
import operator
import sys
import types
from typing import Any


def pin_flags(precision: str) -> None:
    """Pin the numerics flags for reference and candidate alike."""
    import torch

    allow = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def snapshot_flags() -> dict[str, Any]:
    """The numerics flags a candidate could change to cut precision."""
    import torch

    return {
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda.matmul.allow_fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "cuda.matmul.allow_fp16_accumulation": getattr(torch.backends.cuda.matmul, "allow_fp16_accumulation", None),
    }


def flags_diff(pinned: dict[str, Any]) -> dict[str, list[Any]]:
    """{flag: [pinned, now]} for every numerics flag that moved from its pinned value. A flag state
    torch refuses to report (e.g. the newer fp32_precision API mixed with the legacy one) counts as
    moved."""
    try:
        now = snapshot_flags()
    except RuntimeError as exc:
        return {"unreadable": [None, str(exc)[:200]]}
    return {k: [pinned[k], now[k]] for k in pinned if pinned[k] != now[k]}


# Functions whose identity the judge records before the candidate is imported and checks after its
# import and every call: timing and checking functions of torch and the standard library, and the
# judge's own code in this process. A candidate that replaces one is refused (guard
# function_identities), whether or not the replacement would have fooled anything.
WATCHED = (
    "torch.allclose", "torch.isclose", "torch.equal", "torch.testing.assert_close",
    "torch.cuda.synchronize", "torch.cuda.current_stream", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch.cuda.Event.query", "torch.cuda.Stream.synchronize",
    "torch.save", "torch.load", "torch.Tensor.__eq__",
    # what the judge's steps in the candidate child call on tensors (inputs, input check, saves)
    "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.contiguous", "torch.Tensor.view", "torch.Tensor.detach",
    "torch.Tensor.to", "torch.Tensor.__getitem__", "torch.Tensor.__setitem__", "torch.full", "torch.randn", "torch.rand",
    "torch.randint", "torch.zeros", "torch.manual_seed", "torch.cuda.manual_seed_all", "torch.Generator.manual_seed", "torch.unravel_index", "torch.Tensor.fill_",
    # the input check's digest and the timing pool's refresh (judge.inputs): a floor_divide answering
    # zeros, or a Generator whose seed is ignored, would let a changed input pass unseen
    "torch.Tensor.floor_divide", "torch.Tensor.remainder", "torch.Tensor.item", "torch.Tensor.numel", "torch.Tensor.mul_",
    "torch.Tensor.add_", "torch.Tensor.set_", "torch.Tensor.stride", "torch.Tensor.is_contiguous", "torch.Tensor.reshape",
    "torch.Tensor.untyped_storage", "torch.Tensor.storage_offset", "torch.Tensor.element_size", "torch.Tensor.dim",
    "torch.Tensor.conj", "torch.Tensor.int_repr", "torch.Generator", "torch.Generator.manual_seed",
    # the digest's scratch block and its weights' draw, and its conjugation test (a random_ that fills
    # zeros makes every digest agree; tests/test_dispatch_guard.py traces what the check calls)
    "torch.empty", "torch.Tensor.random_", "torch.Tensor.is_conj", "torch.cat",  # the digest's block sums, joined once
    # and the rest of what the judge's steps here call from Python (inputs, near case, refresh, poison, saves), by the same
    # trace: none of these was shown to fool a step, but a test that finds every call watched is simpler to keep true
    "torch.Tensor.cpu", "torch.Tensor.is_complex", "torch.Tensor.is_floating_point", "torch.Tensor.is_inference",
    "torch.Tensor.sub_", "torch.Tensor.unbind", "torch.Tensor.unsqueeze", "torch.tensor",
    "torch.cuda.memory_snapshot", "torch.cuda.memory.memory_snapshot", "torch._C._cuda_memorySnapshot",  # poison's map of free blocks
    "kernelwright.judge.correctness._Span.__init__",  # and its view of one (a dunder: not among the judge's functions below)
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.monotonic_ns", "time.time", "time.time_ns",
    "kernelwright.judge.timing.time_calls", "kernelwright.judge.timing._one_call", "kernelwright.judge.timing.warm_up",
    "kernelwright.judge.timing.flush_l2", "kernelwright.judge.timing.switches_from", "kernelwright.judge.timing._lead_spin",
    "kernelwright.judge.timing._perf_counter", "kernelwright.judge.child._clock", "kernelwright.judge.child_candidate._clock", "kernelwright.judge.timing._elapsed_time", "kernelwright.judge.timing._synchronize",
    "kernelwright.judge.timing._sum", "torch.Tensor.sum", "kernelwright.judge.timing.time_held", "kernelwright.judge.timing.time_null",
    "kernelwright.judge.timing.rehearse", "kernelwright.judge.timing.time_probe", "kernelwright.judge.child_candidate.setup_timing",
    "kernelwright.judge.lead.Lead.spin", "kernelwright.judge.lead.load",
    "kernelwright.judge.digest.cpu_fn", "kernelwright.judge.digest.cuda_fn", "torch.Tensor.data_ptr", "torch.Tensor.tolist",  # the input check's kernel
    "torch.cuda.device", "torch.cuda.get_device_properties", "torch._C._len_torch_function_stack", "torch._C._pop_torch_function_stack",
    "torch._C._push_on_torch_function_stack", "torch._C.DisableTorchFunctionSubclass", "torch._C._DisableTorchDispatch", "torch.Tensor.is_neg", "torch._C._VariableFunctions._neg_view",
    # the hand-over's CUDA driver entries (bound before the watch on CUDA: handover._cuda; missing on the CPU): a
    # replaced cuIpcGetMemHandle could write the answer into the staging area after the call
    *(f"kernelwright.judge.handover._driver.{n}" for n in ("cuMemAlloc_v2", "cuMemFree_v2", "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2",
                                                          "cuIpcCloseMemHandle", "cuMemGetAddressRange_v2")),
    "kernelwright.judge.inputs.make_inputs", "kernelwright.judge.inputs.pool_getter", "kernelwright.judge.inputs.input_record",
    "kernelwright.judge.inputs.changed_inputs", "kernelwright.judge.input_digest.torch_digest", "kernelwright.judge.inputs.refresh_inputs", "kernelwright.judge.correctness.poison", "kernelwright.judge.correctness.as_output_list",
    "kernelwright.judge.channel.Writer.send", "kernelwright.judge.watch.flags_diff", "kernelwright.judge.watch.identities_moved",
    "kernelwright.judge.watch.snapshot_flags", "torch.Tensor.reshape", "torch.Tensor.as_subclass", "torch.as_tensor", "torch.frombuffer",
    "ctypes.string_at", "gc.disable", "gc.enable", "signal.signal", "signal.getsignal",
    "kernelwright.judge.child_candidate._call", "kernelwright.judge.child_candidate._save", "kernelwright.judge.child_candidate.run_case",
    "kernelwright.judge.child_candidate.time_batch", "kernelwright.judge.child_candidate.profile",
)


# ATen operators the judge's own code reaches in the candidate child: inputs made and refreshed, the
# input check, poison, saves and the L2 flush, with what they decompose into and call inside ATen
# (tests/test_dispatch_guard.py records those steps on the CPU, under a dispatch mode and torch's
# legacy profiler, and checks this list covers them; the CUDA-only ones were added by reading
# torch's code: equal on CUDA reduces with all and reads the result with item; the GPU test on the
# H200 shows cat on CUDA copying into narrow views of its output). A kernel
# registered for one of them after the snapshot, through torch.library or TORCH_LIBRARY_IMPL in an
# extension, would run in place of torch's inside those steps: an equal that always agrees hides
# changed inputs, a sum that reads nothing skips the flush. Every overload the dispatcher holds is
# watched (about 100). The operators only the candidate's forward reaches are the op audit's.
JUDGE_OPS = (
    "_index_put_impl_", "_local_scalar_dense", "_reshape_alias", "_to_copy", "add_", "all", "as_strided", "cat", "clone", "contiguous", "copy_",
    "detach", "detach_", "empty", "empty_like", "empty_strided", "eq", "equal", "expand", "expand_as", "fill_", "floor_divide", "full", "index", "index_put_",
    "is_same_size", "item", "lift_fresh", "mul", "mul_", "narrow", "new_zeros", "normal_", "rand", "randint", "randn", "random_", "remainder",
    "reshape", "select", "set_", "slice", "sub", "sub_", "sum", "to", "unbind", "uniform_", "unsqueeze", "view", "zero_", "zeros", "zeros_like",
    "resolve_conj", "resolve_neg", "_neg_view",  # the digest kernel's answer read back (tolist), a negative-bit input read as its bytes
)


def _overload(name: str) -> Any:
    import torch

    base, _, ov = name.split("::", 1)[1].partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


def judge_overloads() -> list[str]:
    """Every overload of JUDGE_OPS the dispatcher holds a registration for ("aten::sub.Tensor")."""
    import torch

    names = []
    for base in JUDGE_OPS:
        for ov in getattr(torch.ops.aten, base).overloads():
            name = f"aten::{base}" if ov == "default" else f"aten::{base}.{ov}"
            if torch._C._dispatch_dump(name):  # overloads TorchScript alone knows print nothing
                names.append(name)
    return names


def _dispatch_context() -> dict[str, Any]:
    """What decides dispatch in this thread besides the registrations: the torch mode stacks and
    the dispatch keys the thread includes or excludes (the Python dispatcher, a backend fallback
    switched on by key)."""
    import torch

    return {"dispatch modes": torch._C._len_torch_dispatch_stack(), "function modes": torch._C._len_torch_function_stack(),
            "included keys": repr(torch._C._dispatch_tls_local_include_set()),
            "excluded keys": repr(torch._C._dispatch_tls_local_exclude_set())}


def snapshot_dispatch() -> dict[str, Any]:
    """The dispatcher's state for the judge's operators: each overload's registrations as torch
    prints them (kernel and where it was registered, per dispatch key), its Python kernels (held),
    and the thread's dispatch context."""
    import torch

    names = judge_overloads()
    return {"dumps": {n: torch._C._dispatch_dump(n) for n in names}, "py": {n: dict(_overload(n).py_kernels) for n in names},
            "context": _dispatch_context()}


def dispatch_moved(snapshot: dict[str, Any]) -> list[str]:
    """What changed since the snapshot: an overload whose registrations or Python kernels differ,
    a torch mode pushed or popped, a dispatch key included or excluded."""
    import torch

    if not snapshot:
        return []
    moved = [f"{n}'s dispatcher kernels" for n, dump in snapshot["dumps"].items() if torch._C._dispatch_dump(n) != dump]
    for n, kernels in snapshot["py"].items():
        now = _overload(n).py_kernels
        if now.keys() != kernels.keys() or any(now[k] is not v for k, v in kernels.items()):
            moved.append(f"{n}'s Python kernels")
    now = _dispatch_context()
    moved += [f"the thread's {what} ({was} before the import, {now[what]} now)" for what, was in snapshot["context"].items() if now[what] != was]
    return moved


def _paths(dotted: str, *, load: bool = False) -> tuple[Any, Any, Any, list[str]]:
    """(object reached attribute by attribute from the top-level module, object reached from the
    longest module prefix in sys.modules, that module, the attributes after it); _MISSING where a
    path ends. Modules are looked up in sys.modules (imported first when load is set, as for the
    snapshot): a check is dictionary lookups only, about 0.5 ms for every watched name against
    4 ms with import_module on the 2-core box (the judge sends that check after each timing batch,
    outside the batch's wall clock, as it does the dispatcher's, which costs about 2 ms more)."""
    parts = dotted.split(".")
    if load:
        import importlib

        for cut in range(len(parts), 0, -1):
            try:
                importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
    walk = _walk(sys.modules.get(parts[0], _MISSING), parts[1:])
    for cut in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:cut]))
        if mod is not None:
            return walk, _walk(mod, parts[cut:]), mod, parts[cut:]
    return walk, _MISSING, None, []


def _walk(obj: Any, attrs: list[str]) -> Any:
    for attr in attrs:
        if obj is _MISSING:
            return _MISSING
        obj = getattr(obj, attr, _MISSING)
    return obj


_MISSING = object()


WATCHED_EXTRA = ("random.seed", "numpy.random.seed",  # inputs._seed_all seeds them before every draw, between timed calls too
                 "secrets.randbits", "json.dumps", "json.loads", "hmac.new", "hmac.compare_digest", "hashlib.sha256", "os.write", "os._exit")


def _judge_functions() -> list[str]:
    """Every function and method of the package bound in the judge's and the runtime's modules
    loaded here (so replacing an imported name such as child_candidate.identities_moved shows)."""
    names = []
    for mod_name, mod in list(sys.modules.items()):
        if not _judge_module(mod_name) or mod is None:
            continue
        for attr, obj in list(vars(mod).items()):
            owner = str(getattr(obj, "__module__", "") or "")
            if not (owner.startswith("kernelwright.") or owner == "kw_problem"):
                continue  # the package's own functions, imported ones included, and the problem's
            if callable(obj) and not isinstance(obj, type):
                names.append(f"{mod_name}.{attr}")
            elif isinstance(obj, type):
                names += [f"{mod_name}.{attr}.{m}" for m, f in vars(obj).items() if callable(f) and not m.startswith("__")]
    return names


MODULES_KEY = "<module state>"  # the snapshot's entry for module_state() (not a watched name)


def snapshot_identities() -> dict[str, Any]:
    """The watched objects themselves (held, so their ids cannot be reused), by name: WATCHED, a
    few standard-library functions the channel relies on, and every function of the judge's own
    modules in this process. Each name is recorded along three paths (see identities_moved), with
    what a Python function runs (_body); and, under MODULES_KEY, the state those functions read
    (module_state)."""
    names = dict.fromkeys(WATCHED + WATCHED_EXTRA + tuple(_judge_functions()))
    snap: dict[str, Any] = {name: (*paths, (body, tuple(map(id, body))))
                            for name in names for paths in (_paths(name, load=True),) for body in (_body(paths[0]),)}
    snap[MODULES_KEY] = module_state()
    return snap


def _judge_module(name: str) -> bool:
    """The judge's and the runtime's modules, and the problem module the candidate child loaded
    (kw_problem): the judge calls its get_inputs() between timed calls, so a wrapper the candidate
    put there would run outside the timed region."""
    return name.startswith("kernelwright.judge") or name.startswith("kernelwright.runtime") or name == "kw_problem"


def module_state() -> tuple[dict[str, tuple[Any, type, dict[str, Any]]], frozenset[str]]:
    """Every judge, runtime and problem module's class and namespace (each value held), and the
    builtins'; with the global names the judge's code can read (its functions' code names, and
    every builtin's name, which a global of that name would shadow). The judge's functions read
    their module's globals (a constant such as the digest's modulus, a module they imported, a new
    global shadowing a builtin such as `zip`) and the builtins (`__import__`, `zip`): replacing any
    of them changes what a watched function does while every watched object stays in place
    (`digest.P = 1` makes every digest agree)."""
    state = {name: (mod, type(mod), dict(vars(mod))) for name, mod in list(sys.modules.items())
             if mod is not None and _judge_module(name)}
    read: set[str] = set(vars(builtins))
    for name, (_, _, names) in state.items():
        for value in names.values():
            if getattr(value, "__module__", None) == name:  # its code reads this module's globals
                read.update(_global_names(value))
    state["builtins"] = (builtins, type(builtins), dict(vars(builtins)))
    return state, frozenset(read)


def _global_names(value: Any) -> set[str]:
    """The global names a function (or a class's methods) of the judge's can read: its code's
    names and its nested code's, recursively."""
    codes: list[Any] = []
    if isinstance(value, type):
        codes += [getattr(getattr(f, "__func__", f), "__code__", None) for f in vars(value).values()]
    else:
        codes.append(getattr(getattr(value, "__func__", value), "__code__", None))
    names: set[str] = set()
    while codes:
        code = codes.pop()
        if isinstance(code, types.CodeType):
            names.update(code.co_names)
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return names


def modules_moved(recorded: tuple[dict[str, tuple[Any, type, dict[str, Any]]], frozenset[str]]) -> list[str]:
    """What changed since module_state: a module's class, a name rebound or removed, a name added
    that the judge's code reads (a builtin's or a global its code names; torch.compile's frames add
    `__compiled_fn_...` to the modules of the frames it compiles and a warning adds
    `__warningregistry__`: the judge reads neither). A package's own submodule imported since, a
    module of exactly that dotted name, is the package's."""
    state, read = recorded
    moved = []
    for name, (mod, kind, was) in state.items():
        if type(mod) is not kind:
            moved.append(f"{name} (its class)")
            continue
        now = dict.copy(object.__getattribute__(mod, "__dict__"))
        if not _str_keys(now):  # a key whose __eq__ answers for a name the judge looks up (its own checks included)
            moved.append(f"{name} (a key that is not a string)")
            continue
        for key, value in was.items():
            if now.get(key, _MISSING) is not value:
                moved.append(f"{name}.{key}")
        if mod is builtins:
            continue  # a builtin added shadows nothing
        for key in now.keys() - was.keys():
            value = now[key]
            if (key not in state["builtins"][2] and type(value) is types.ModuleType and hasattr(mod, "__path__")
                    and getattr(getattr(value, "__spec__", None), "name", None) == f"{name}.{key}" and sys.modules.get(f"{name}.{key}") is value):
                continue
            if key in read:
                moved.append(f"{name}.{key} (added)")
    return moved


def _body(obj: Any, depth: int = 0) -> tuple[Any, ...]:
    """What a Python function runs, beside its identity: its code and the code's constants, its
    defaults (each value), its closure cells' contents and the function it wraps (a method's,
    classmethod's or staticmethod's function's); a ctypes function's address, argument and
    result types and error check. Replacing `f.__code__`, `f.__defaults__`, an entry of
    `f.__kwdefaults__`, a cell, or a ctypes function's `errcheck` keeps the object, so an
    identity alone lets a candidate give a watched function another body (the input check's
    digest answering one constant for every input)."""
    import ctypes

    if isinstance(obj, ctypes._CFuncPtr):
        return ("ctypes", ctypes.cast(obj, ctypes.c_void_p).value, obj.restype, getattr(obj, "errcheck", None),
                *(obj.argtypes or ()))
    fn = getattr(obj, "__func__", obj)
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return ()
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            cells.append(_MISSING)
    kw = fn.__kwdefaults__ or {}
    wrapped = getattr(fn, "__wrapped__", None)
    inner = _body(wrapped, depth + 1) if wrapped is not None and depth < 3 else ()
    return (code, *code.co_consts, fn.__defaults__, *(fn.__defaults__ or ()), fn.__kwdefaults__, *kw.keys(), *kw.values(),
            len(cells), *cells, wrapped, *inner)


def identities_moved(snapshot: dict[str, Any]) -> list[str]:
    """Names whose object is no longer the one recorded along any path: attribute by attribute
    from the top-level module, from the longest module prefix now in sys.modules, and from the
    module object held since the snapshot (what the judge's own `from ... import module` holds,
    so replacing the module in sys.modules and on its package does not hide a patch); then what
    changed in the modules' state (modules_moved)."""
    moved = []
    for name, entry in snapshot.items():
        if name == MODULES_KEY:
            moved += modules_moved(entry)
            continue
        walk0, prefix0, held, rest, body0 = entry
        walk, prefix = _paths(name)[:2]
        if walk is not walk0 or prefix is not prefix0 or (held is not None and _walk(held, rest) is not prefix0):
            moved.append(name)
            continue
        body = _body(walk)
        if tuple(map(id, body)) == body0[1]:
            continue  # the same objects (body0[0] holds them, so their ids are theirs): the usual case, in one C comparison
        body0 = body0[0]
        if len(body) != len(body0) or any(a is not b and not (type(a) is type(b) is int and a == b) for a, b in zip(body, body0)):
            moved.append(name)  # the same function object with another code, defaults, closure or C entry
    return moved


_IS, _REPEAT, _MAP, _ALL, _TYPE = operator.is_, itertools.repeat, map, all, type
def _str_keys(d: dict[Any, Any]) -> bool:
    """Whether every key of d is an exact str: identity on the keys' types, nothing of theirs called
    (a metaclass's __eq__ or __hash__ could answer for a key's type)."""
    return _ALL(_MAP(_IS, _MAP(_TYPE, d), _REPEAT(str)))
