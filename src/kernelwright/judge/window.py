"""The window between a timed call's seed and its start (guard between_calls): what note_hooks
and note_window record before the candidate's import, what quiet_window switches off and says
before each seed is asked for, the ask itself (ask_seed) and a timed batch's inputs (batch_getter).
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import types
from typing import Any, Callable

from kernelwright.judge.channel import Writer
from kernelwright.judge.watch import _MISSING, _str_keys


_SEED_FD = -1  # the result channel's socket: each timed call's seed comes on it (ask_seed)
_SEED_ID: tuple[int, int] | None = None  # its (st_dev, st_ino) when note_hooks ran
_WRITER: Any = None  # the authenticated channel to the judge, bound by child.serve() (bind_writer)
_send = Writer.send  # the class's method: an attribute set on the writer object is never called
_os_read, _os_fstat, _os_listdir, _os_getpid, _os_getsid = os.read, os.fstat, os.listdir, os.getpid, os.getsid
_SIGNALS: list[Any] = []  # signal.valid_signals(), listed once: the call alone costs about 0.1 ms


# Between a timed call's seed arriving and its start event (inputs.asking_getter) no code of the
# candidate's may run: it would know the call's inputs and could compute the answer outside the
# timed region. quiet_window, called just before each seed is asked for, switches off what could
# run such code on this thread, and says what it found, which goes to the judge with the ask (so
# nothing the candidate changes later takes it back):
# - hooks: a trace or profile function, a sys.monitoring tool, a Python signal handler (a timer's
#   handler runs between any two bytecodes), all switched off; and the cyclic collector (a __del__
#   or weakref callback of the candidate's garbage runs at any allocation), switched off silently;
# - what the draw reads and could run the candidate's code: the classes of the modules it goes
#   through, torch.Tensor's and the device context's class dicts, random's and numpy's global
#   generators, and what the problem's get_inputs() reads from its modules (note_window);
# - descriptor 0 swapped (the seed's way in) and, for the judge to refuse where the policy allows no
#   torch compute: Python threads and child processes (each races the judge's own draw: it reads
#   the seed when the draw starts).
# What note_hooks and note_window recorded: module globals holding tuples, so that a change is a
# rebinding, which the watch on the judge's namespaces (function_identities) sees.
_BASE_HANDLERS: tuple[Any, ...] = ()
_BASE_TOOLS: tuple[Any, ...] = ()
_BASE_SIGNAL: tuple[Any, ...] = (None, None)
_BASE_WINDOW: tuple[Any, ...] = ((), (), (), (), None)
_BASE_CHILDREN: tuple[str, ...] = ()  # child processes the judge's own code had when note_hooks ran
_BASE_SESSION: tuple[str, ...] = ()  # other processes of this session then (none in a judge child: it starts one)
_SIG_IGN: Any = None  # signal.SIG_IGN, bound by note_hooks
_current_frames = sys._current_frames  # bound before any candidate code runs
_get_ident = _thread.get_ident
_ModuleType = types.ModuleType
_BASE_DRAW: tuple[Any, ...] = (None, None)  # (problem module, device) as the judge's setup made them (note_window)
_BASE_DICTS: tuple[Any, ...] = ()  # (dict, its size, what it is) for each namespace the path from a seed to its call looks names up in
_DICT_SIZE = dict.__sizeof__  # bound: sys.getsizeof looks __sizeof__ up on the type
_DISPATCH_LEN: Any = None  # torch._C's dispatch mode stack, bound by note_window
_DISPATCH_POP: Any = None
_DISPATCH_KEYS: Any = None  # () -> the thread's local dispatch key sets, bound by note_window


def note_hooks(seed_fd: int = -1) -> None:
    """Record the signal handlers and sys.monitoring tools as the judge's own code left them, and
    the descriptor the seeds come on; called once per child, before any candidate code is imported."""
    import signal

    global _SIG_IGN, _SEED_FD, _SEED_ID, _BASE_HANDLERS, _BASE_TOOLS, _BASE_SIGNAL, _BASE_CHILDREN, _BASE_SESSION
    _BASE_CHILDREN = tuple(_children())
    _BASE_SESSION = tuple(_session())
    if not _SIGNALS:
        _SIGNALS.extend(signal.valid_signals())
    handlers = []
    for sig in _SIGNALS:
        try:
            handlers.append((sig, signal.getsignal(sig)))
        except (OSError, ValueError, RuntimeError):
            continue
    mon = getattr(sys, "monitoring", None)
    _BASE_HANDLERS = tuple(handlers)
    _BASE_TOOLS = tuple((t, mon.get_tool(t)) for t in range(6)) if mon is not None else ()
    _BASE_SIGNAL = (signal.signal, signal.getsignal)
    _SIG_IGN = signal.SIG_IGN
    _SEED_FD = seed_fd
    try:
        st = _os_fstat(seed_fd)
        _SEED_ID = (st.st_dev, st.st_ino)
    except OSError:
        _SEED_ID = None


def note_window(problem: Any, device: Any) -> None:
    """Record what the draw of a timed call's inputs reads (judge.inputs._draw), before the
    candidate's import: the problem module and device the draw uses (batch_getter uses these, not
    the child's state object, which the candidate can reach); the modules it goes through and their
    classes; torch.Tensor's, its metaclass's and the device context's class dicts; for each module
    the problem's get_inputs() names (its code's names looked up there: `torch.randn` reads `randn`
    from torch) and get_inputs itself, with the code, defaults and closure of each of those that is
    a Python function; and the thread's dispatch keys."""
    import torch

    from kernelwright.judge import inputs

    mods = [sys.modules.get(n) for n in ("torch", "torch.cuda", "torch.utils._device", "torch.random", "random", "numpy",
                                         "numpy.random", "numpy.random.mtrand")]
    mods.append(problem)
    fn = getattr(problem, "get_inputs", None)
    names = set(getattr(getattr(fn, "__code__", None), "co_names", ())) | {"get_inputs", "get_test_inputs"}
    for value in vars(problem).values():
        if isinstance(value, _ModuleType):
            mods.append(value)
    modules = tuple((m, type(m)) for m in dict.fromkeys(m for m in mods if m is not None))
    reads = tuple((m, name, vars(m)[name]) for m, _t in modules for name in sorted(names) if name in vars(m))
    functions = tuple((f, _function_parts(f)) for f in dict.fromkeys(v for _m, _n, v in reads if type(v) is types.FunctionType))
    classes = tuple((c, tuple(vars(c).items())) for c in (torch.Tensor, type(torch.Tensor), inputs._DEVICE_CONTEXT))
    global _BASE_WINDOW, _BASE_DRAW, _DISPATCH_LEN, _DISPATCH_POP, _DISPATCH_KEYS
    _DISPATCH_LEN, _DISPATCH_POP = torch._C._len_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack
    include, exclude = torch._C._dispatch_tls_local_include_set, torch._C._dispatch_tls_local_exclude_set
    _DISPATCH_KEYS = lambda: (repr(include()), repr(exclude()))  # noqa: E731 - bound here, before the import
    _BASE_WINDOW = (modules, reads, classes, functions, _DISPATCH_KEYS())
    _BASE_DRAW = (problem, device)
    global _BASE_DICTS
    _BASE_DICTS = tuple((d, _DICT_SIZE(d), what) for d, what in _path_dicts([m for m, _t in modules], device))


# The namespaces the path from a timed call's seed to its start looks names up in (the draw, the
# problem's get_inputs(), numpy's seeding, the timing loop up to the start event). A key that is
# not an exact str in one of them, given the hash of a name looked up there, has its __eq__ run by
# that lookup, after the seed (keys colliding with "gauss_next" in random's instance dict,
# "get_inputs" in the problem's, "list" in builtins or "index" in operator's can compute the answer
# there, at about 3x eager). A dict holding only exact str keys keeps CPython's
# compact string-keyed layout, whose size a key of any other type changes (the table is rebuilt
# with wider entries): quiet_window compares each dict's size and reads its keys' types only where
# the size moved (the dict grew, or such a key came).
_PATH_MODULES = ("builtins", "torch", "torch._C", "torch._utils", "torch.cuda", "torch.cuda.streams", "torch.cuda._utils",
                 "torch.utils._device", "torch.overrides", "torch.random", "random", "_random", "operator", "numpy", "numpy.random",
                 "numpy.random.mtrand", "numpy.random._mt19937", "numpy.random.bit_generator", "numpy.random._common")
_PATH_PREFIXES = ("kernelwright.judge.", "kernelwright.runtime")


def _path_dicts(extra: list[Any], device: Any) -> list[tuple[dict[str, Any], str]]:
    import gc
    import random

    import torch

    from kernelwright.judge import inputs, timing

    mods = [sys.modules.get(n) for n in _PATH_MODULES]
    mods += [m for n, m in list(sys.modules.items()) if n.startswith(_PATH_PREFIXES)]
    out: dict[int, tuple[dict[str, Any], str]] = {}
    for m in mods + list(extra):
        d = getattr(m, "__dict__", None)
        if type(d) is dict:
            out.setdefault(id(d), (d, f"module {getattr(m, '__name__', '?')}"))
    inst = inputs._RANDOM_INST
    out.setdefault(id(vars(inst)), (vars(inst), "random's instance"))
    classes: list[Any] = [torch.Tensor, torch._C.TensorBase, type(torch.Tensor), torch.device, torch.Generator, inputs._DEVICE_CONTEXT,
                          torch.overrides.TorchFunctionMode, random.Random, inputs._random.Random, types.ModuleType, types.FunctionType,
                          type, object, list, tuple, dict, int, bytes, str, bool, float, type(None), timing.TimingSwitches]
    if getattr(device, "type", None) == "cuda":
        classes += [torch.cuda.Event, torch.cuda.Stream, torch._C._CudaEventBase, torch._C._CudaStreamBase]
    if inputs._numpy is not None:
        classes += [inputs._NUMPY_STATE_CLASS, inputs._NUMPY_BITGEN_CLASS, type(inputs._NUMPY_BITGEN).__mro__[1]]
    for c in classes:
        for d in gc.get_referents(vars(c)):  # the class's own dict behind its mappingproxy
            if type(d) is dict:
                out.setdefault(id(d), (d, f"the class dict of {c.__qualname__}"))
    return list(out.values())


def _foreign_keys() -> list[str]:
    """The path's namespaces (above) holding a key that is not an exact str."""
    return [what for d, size, what in _BASE_DICTS if _DICT_SIZE(d) != size and not _str_keys(d)]


def _function_parts(f: Any) -> tuple[Any, ...]:
    """What a Python function runs, which the function object lets anyone replace or change in
    place: its code, defaults, keyword defaults (each key and value) and closure cells' contents;
    compared one by one by identity (an __eq__ could answer for itself)."""
    kw = f.__kwdefaults__
    parts = [f.__code__, f.__defaults__, kw, len(kw or ())]
    for k, v in (kw or {}).items():
        parts += (k, v)
    parts.append(len(f.__closure__ or ()))
    parts += [_cell(c) for c in (f.__closure__ or ())]
    return tuple(parts)


def _cell(c: Any) -> Any:
    try:
        return c.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


def _moved_in_window() -> list[str]:
    """What note_window recorded that is no longer as it was (inputs' own bindings included)."""
    from kernelwright.judge import inputs

    out = []
    modules, reads, classes, functions, keys = _BASE_WINDOW
    for m, t in modules:
        if type(m) is not t:
            out.append(f"the class of module {getattr(m, '__name__', '?')}")
    for m, name, value in reads:
        if vars(m).get(name, _MISSING) is not value:
            out.append(f"{getattr(m, '__name__', '?')}.{name}, which the problem's get_inputs() reads")
    for f, parts in functions:
        now = _function_parts(f)
        if len(now) != len(parts) or any(a is not b and not (type(a) is int and type(b) is int and a == b) for a, b in zip(now, parts)):
            out.append(f"the code, defaults or closure of {getattr(f, '__qualname__', '?')}, which the draw runs")
    for c, items in classes:
        now = vars(c)
        if len(now) != len(items) or any(now.get(k, _MISSING) is not v for k, v in items):
            out.append(f"the class dict of {c.__qualname__}")
    if _DISPATCH_KEYS is not None and _DISPATCH_KEYS() != keys:
        out.append("the thread's dispatch keys")
    if random_inst() is not inputs._RANDOM_INST or type(inputs._RANDOM_INST) is not inputs._RANDOM_CLASS:
        out.append("random's global generator")
    if inputs._numpy is not None and (inputs._numpy.random.mtrand._rand is not inputs._NUMPY_STATE
                                      or type(inputs._NUMPY_STATE) is not inputs._NUMPY_STATE_CLASS):
        out.append("numpy's global generator")
    elif inputs._numpy is not None and (inputs._NUMPY_STATE._bit_generator is not inputs._NUMPY_BITGEN
                                        or type(inputs._NUMPY_BITGEN) is not inputs._NUMPY_BITGEN_CLASS):
        out.append("numpy's global bit generator")  # set_bit_generator: a subclass's _legacy_seeding would see the seed
    return out


def random_inst() -> Any:
    import random

    return vars(random).get("_inst")


def open_window() -> bool:
    """Start a timed batch's watch: the collector's state now, for close_window."""
    import gc

    return gc.isenabled()


def quiet_window(first: bool, keep: list[Any]) -> list[str]:
    """Switch off and say what could run the candidate's code on this thread until the timed call
    starts (above); the list goes to the judge with the ask. `first`: the batch's first ask, which
    also reads the session's processes (a few ms). Whatever is taken away here (a hook function, a
    handler, a mode, random's cached gauss value) goes to `keep`, which the caller holds until the
    call has its inputs: freed here, a __del__ of the candidate's would run after the checks and
    before the seed, and could put back what was just taken away. Costs about 86 us on the 2-core
    box, most of it reading this process's children and 62 signal handlers
    (benchmarks/results/window_cpu.md)."""
    import gc

    gc.disable()  # every call: the candidate's call may have switched it back on
    from kernelwright.judge import inputs

    found = []
    inst = inputs._RANDOM_INST
    keep.append(vars(inst).get("gauss_next"))  # random.gauss()'s cached value; the seed sets it to None (a __del__ there would see the seed)
    inputs._OBJECT_SETATTR(inst, "gauss_next", None)
    if sys.gettrace() is not None:
        found.append("hook: a trace function (sys.settrace)")
        keep.append(sys.gettrace())
        sys.settrace(None)
    if sys.getprofile() is not None:
        found.append("hook: a profile function (sys.setprofile)")
        keep.append(sys.getprofile())
        sys.setprofile(None)
    mon = getattr(sys, "monitoring", None)
    if mon is not None:
        for tool, was in _BASE_TOOLS:
            name = mon.get_tool(tool)
            if name is not None and name != was:
                found.append(f"hook: sys.monitoring tool {tool} ({name!r})")
                _clear_tool(mon, tool, keep)
    setsignal, getsignal = _BASE_SIGNAL
    for sig, was in _BASE_HANDLERS:
        now = getsignal(sig)
        if now is not was and callable(now):  # SIG_DFL and SIG_IGN run no Python code: a SIGPIPE put back to SIG_DFL is no hook
            found.append(f"hook: a handler for signal {int(sig)}")
            keep.append(setsignal(sig, _SIG_IGN))  # not the judge's own default: a timer the candidate armed must not kill the child
    if _DISPATCH_LEN is not None and _DISPATCH_LEN() > 0:  # a mode left on would see the refresh's set_ of the fresh draw
        found.append("hook: a torch dispatch mode left on after the call")
        while _DISPATCH_LEN() > 0:
            keep.append(_DISPATCH_POP(None))
    found += [f"hook: {what} changed" for what in _moved_in_window()]
    found += [f"hook: a key that is not a string in {what}" for what in _foreign_keys()]
    if vars(inst) is not inputs._RANDOM_DICT:
        found.append("hook: random's instance given another dict")
    if vars(inst).get("gauss_next") is not None:
        found.append("hook: random's cached gauss value set again while the window was made quiet")
    if _SEED_ID is not None:
        try:
            st = _os_fstat(_SEED_FD)
            moved = (st.st_dev, st.st_ino) != _SEED_ID
        except OSError:
            moved = True
        if moved:
            found.append("hook: the channel's descriptor (the seeds' way in) replaced")
    me = _get_ident()
    frames = _current_frames()
    if len(frames) > 1:
        named = {t.ident: t.name for t in threading.enumerate()}
        found += [f"thread: {named.get(ident, ident)}" for ident in frames if ident != me]
    found += [f"process: {pid}" for pid in _children() if pid not in _BASE_CHILDREN]
    if first:  # once a batch: a process that left this one's children still shares the session
        found += [f"process: {pid} (in this session)" for pid in _session() if pid not in _BASE_SESSION]
    return found


def _session() -> list[str]:
    """Processes of this process's session other than itself, from /proc (a double fork leaves the
    children's list; the session stays: a relay that read each seed off an inherited descriptor)."""
    out: list[str] = []
    try:
        me, sid = _os_getpid(), _os_getsid(0)
        for name in _os_listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if len(fields) > 3 and int(fields[3]) == sid:
                out.append(name)
    except OSError:
        pass
    return out


def _children() -> list[str]:
    """This process's child processes, from /proc (every thread's list)."""
    out: list[str] = []
    try:
        for tid in _os_listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                out += f.read().decode().split()
    except OSError:
        pass
    return out


def _clear_tool(mon: Any, tool: int, keep: list[Any]) -> None:
    mon.set_events(tool, 0)
    for name in dir(mon.events):
        ev = getattr(mon.events, name)
        if isinstance(ev, int) and ev and not ev & (ev - 1):
            try:
                keep.append(mon.register_callback(tool, ev, None))
            except ValueError:
                continue
    mon.free_tool_id(tool)


def close_window(collector: bool) -> None:
    """End a timed batch's watch: the collector as it was (open_window)."""
    import gc

    if collector:
        gc.enable()


def bind_writer(writer: Writer) -> None:
    """Bind the channel ask_seed sends on (child.serve, before the first command)."""
    global _WRITER
    _WRITER = writer


def ask_seed(index: int, found: list[str]) -> int:
    """The seed of a timed batch's ask `index` (counting asks, not calls), from the judge, asked for
    now (inputs.asking_getter) with what quiet_window found: one message on the channel, sent
    through the writer's class method, and one line read in answer from the channel's socket with
    os.read bound at import (a line there cannot be put back by code that read it first, as one on
    the stdin pipe could through /proc/self/fd/0)."""
    if _WRITER is None:
        raise RuntimeError("no channel to ask the judge for a seed")
    _send(_WRITER, {"ask": index, "found": found})
    line = b""
    while not line.endswith(b"\n"):
        chunk = _os_read(_SEED_FD, 64)
        if not chunk:
            raise EOFError("the judge closed the channel while a seed was asked for")
        line += chunk
    return int(line)


def batch_getter(problem: Any, pool: list[list[Any]], calls: list[list[Any]], device: Any) -> tuple[Callable[[int], list[Any]], Callable[[], None]]:
    """(get_args, finish) for a timed batch in either child: each call's seed asked for in its turn
    (inputs.asking_getter) inside the watch above; finish() lets go of what the refreshes replaced
    and puts the collector back. The draw uses the problem module and device note_window recorded,
    not the ones passed from the child's state object, which the candidate can reach: a proxy put
    there would run inside the draw. One that differs is said with every ask, as
    is a timing pool that is not a plain list."""
    from kernelwright.judge import inputs

    said: list[str] = []
    bound_problem, bound_device = _BASE_DRAW
    if bound_problem is not None:
        if problem is not bound_problem:
            said.append("hook: the problem module the draw reads replaced")
        if type(device) is not type(bound_device) or device != bound_device:
            said.append("hook: the device the draw uses replaced")
        problem, device = bound_problem, bound_device
    if type(pool) is not list:
        said.append("hook: the timing pool replaced")
        pool = [[] for _ in range(1 + max((c[0] for c in calls), default=0))]
    dropped: list[Any] = []
    collector = open_window()
    told = tuple(said)  # a tuple: what the lambda says cannot be emptied in place
    quiet = (lambda first, keep: [*told, *quiet_window(first, keep)]) if told else quiet_window
    get_args = inputs.asking_getter(problem, pool, calls, device, ask_seed, quiet, dropped)

    def finish() -> None:
        dropped.clear()
        close_window(collector)

    return get_args, finish
