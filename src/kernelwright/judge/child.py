"""Entry point of a judge child: `python -m kernelwright.judge.child ROLE FD`.

ROLE is `reference`, `candidate` or `hosted` (judge.workers): a hosted child enters the sandbox
first, then serves the handlers() of the kernelwright module that COMMANDS_ENV names, given by
the caller that started it (a layer above the judge; the judge imports none of it).

Reads the channel key from stdin before anything else, then JSON commands, one a line; answers on
the authenticated pipe FD (the command loop, its replies and the hush after a hand-over are here;
the watches are judge.watch, before and after the candidate's code, and judge.window, between a
timed call's seed and its start). Imports only torch, numpy and the standard library (plus our own modules),
so it runs unchanged on a bare GPU image.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any, Callable

from kernelwright.judge import window
from kernelwright.judge.channel import Writer
from kernelwright.core.records import truncate

# The judge's clock here, bound before any candidate code runs: a candidate that replaces
# time.perf_counter (the guard function_identities refuses it) must not make the judge's own
# start-up figures malformed: on a box up for a day, a patched clock's 1e-9 minus a real start reads
# as -86 719 s, which replies.seconds_value refuses, and the verdict says 'forged' instead of the guard's.
_clock = time.perf_counter
# stdin as main() found it (a forked child's is set just before), read through its class's method
# (the commands); each timed call's seed is read from its descriptor with os.read (window.ask_seed). Bound
# in main(), whatever the candidate later puts at sys.stdin or on the object.
_STDIN: Any = None
_readline: Any = None
STARTED = _clock()  # when this child's interpreter reached us (before torch)
# In a child forked from the fork server (judge.forkserver): seconds from the fork to each of its
# steps before STARTED, for the judge's progress line (a cold reference child on the H200 can take
# 2.8 s between its fork and STARTED, unexplained). Empty in a spawned child.
FORK_STEPS: dict[str, float] = {}
COMMANDS_ENV = "KERNELWRIGHT_CHILD_COMMANDS"  # a hosted child's command table: the module whose handlers() it serves


class CommandError(Exception):
    """An error with a kind the judge maps to a verdict (problem, compile, runtime, oom)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def lead_status(device: Any) -> dict[str, Any]:
    """Load the timing protocol's lead spin (CUDA only) and say whether it loaded."""
    if getattr(device, "type", device) != "cuda":
        return {}
    from kernelwright.judge import lead

    spinner = lead.load()
    return {"lead_ok": spinner is not None, "lead": spinner.describe() if spinner else lead.why()}


def error_kind(exc: BaseException) -> str:
    """Classify an exception from model code: oom, cuda (context lost), or runtime."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "oom"
    text = str(exc)
    accel = getattr(torch, "AcceleratorError", ())
    if (accel and isinstance(exc, accel)) or "CUDA error" in text or "illegal memory access" in text:
        return "cuda"
    return "runtime"


CODE_ROOT: list[str] = []  # in a candidate child: the folder of the candidate's code (child_candidate.setup)


def describe(exc: BaseException) -> str:
    """The exception and the end of its traceback, length-capped. In a candidate child, only the
    frames of the candidate's own files: the judge's frames say nothing about its mistake."""
    if CODE_ROOT:
        own = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(CODE_ROOT[0])]
        where = "".join(traceback.format_list(own[-6:]))
        where = f"\nin the candidate's code (innermost last):\n{where}" if where else ""
        return truncate(f"{type(exc).__name__}: {exc}{where}", 4000)
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    return truncate(f"{type(exc).__name__}: {exc}\n{tb}", 4000)


OUTBOX: list[int] = []  # descriptors to go with the next reply (judge.handover); closed here once sent
QUIET: dict[str, Any] = {}  # while hushed: the collector's state, the deferred handlers and the signals they missed
_SIGNALS: list[Any] = []  # signal.valid_signals(), listed once: the call alone costs about 0.1 ms


def hush() -> None:
    """From an output's staging until the next command, no code of the candidate's runs on this
    thread: the cyclic collector is off (no __del__ or weakref callback of its garbage) and Python
    signal handlers are replaced by a recorder (no handler of a timer it armed), so nothing can
    rewrite what was staged while the reference child takes it. serve() undoes it."""
    if QUIET:
        return
    import gc
    import signal

    caught: list[int] = []
    handlers = {}
    if not _SIGNALS:
        _SIGNALS.extend(signal.valid_signals())
    for sig in _SIGNALS:
        try:
            handler = signal.getsignal(sig)
            if callable(handler):
                signal.signal(sig, lambda s, _frame: caught.append(s))
                handlers[sig] = handler
        except (OSError, ValueError, RuntimeError):
            continue
    QUIET.update(gc=gc.isenabled(), handlers=handlers, caught=caught)
    gc.disable()


def unhush() -> None:
    """Put the handlers and the collector back; signals that came meanwhile are raised again."""
    if not QUIET:
        return
    import gc
    import signal

    for sig, handler in QUIET["handlers"].items():
        signal.signal(sig, handler)
    if QUIET["gc"]:
        gc.enable()
    caught = QUIET["caught"]
    QUIET.clear()
    for sig in dict.fromkeys(caught):
        signal.raise_signal(sig)


def serve(handlers: dict[str, Callable[[dict[str, Any]], Any]], writer: Writer) -> None:
    """Answer commands from stdin until 'exit' or end of input. A command that names descriptors
    ("fds": n) finds them in args["_fds"]; they are closed after its handler returns."""
    window.bind_writer(writer)
    while True:
        line = _readline(_STDIN)
        if not line:
            return
        msg = json.loads(line)
        if msg["cmd"] == "exit":
            return
        unhush()
        args = msg.get("args", {})
        fds = writer.recv_fds(int(msg["fds"])) if msg.get("fds") else []
        args["_fds"] = fds
        handler = handlers.get(msg["cmd"])
        try:
            if handler is None:
                writer.send({"ok": False, "error": {"kind": "infra", "message": f"unknown command {msg['cmd']!r}"}})
                continue
            fatal = _answer(handler, args, writer, timed=msg["cmd"] == "setup")
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if fatal:
            os._exit(3)  # a CUDA context after an illegal access is unusable


def _send_outbox(writer: Writer, reply: dict[str, Any]) -> None:
    fds = list(OUTBOX)
    OUTBOX.clear()
    try:
        writer.send({**reply, "fds": len(fds)} if fds and reply.get("ok") else reply, fds if reply.get("ok") else ())
    finally:
        for fd in fds:
            os.close(fd)


def _answer(handler: Callable[[dict[str, Any]], Any], args: dict[str, Any], writer: Writer, timed: bool = False) -> bool:
    began = _clock()
    try:
        result = handler(args)
        if timed and isinstance(result, dict):  # start-up cost, for the judge's log
            result["child_seconds"] = {"before_command": began - STARTED, "command": _clock() - began,
                                       **{f"fork_{k}": v for k, v in FORK_STEPS.items()}}
        if isinstance(result, dict) and not result.get("handover"):  # never between a staged output and its reading
            note_memory(result)
    except CommandError as exc:
        _send_outbox(writer, {"ok": False, "error": {"kind": exc.kind, "message": str(exc)}})
        return False
    except BaseException as exc:  # noqa: BLE001 - every failure of model code becomes a reply
        kind = error_kind(exc)
        _send_outbox(writer, {"ok": False, "error": {"kind": kind, "message": describe(exc)}})
        return kind == "cuda"
    _send_outbox(writer, {"ok": True, "result": result})
    return False


def note_memory(result: dict[str, Any]) -> None:
    """On CUDA, add `memory_mib` to a reply: [what this process's caching allocator reserves now,
    the most it reserved since the last reply, the candidate's staging area (judge.handover), what
    live tensors hold now and held at most since the last reply, the free parts of split blocks now
    (reserved memory that only a block that fits in them can use)], and
    start the next command's peak afresh. For the judge's debug log only (judge.workers): which
    command sets a child's peak, where nvidia-smi sees only the process. Not called for a reply
    that hands an output over: the torch functions here are ones a candidate could replace, and
    nothing of the candidate's may run between the staging and the reading."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    cand = sys.modules.get("kernelwright.judge.child_candidate")
    stager = getattr(getattr(cand, "S", None), "stager", None)
    size = vars(stager).get("_size", 0) if hasattr(stager, "__dict__") else 0
    staging = size if type(size) is int else 0
    stats = torch.cuda.memory_stats()  # one call: memory_reserved() and the rest each make this dict again
    result["memory_mib"] = [int(stats.get(k, 0)) >> 20 for k in ("reserved_bytes.all.current", "reserved_bytes.all.peak")] + [staging >> 20] + [
        int(stats.get(k, 0)) >> 20 for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "inactive_split_bytes.all.current")]
    torch.cuda.reset_peak_memory_stats()


def _private_sys_path() -> None:
    """Drop the working folder (which `python -m` puts first) from sys.path: a candidate can write
    there, and lazy imports (torch.compile's, for one) must not find its files."""
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]


def _hosted() -> Callable[[], dict[str, Callable[[dict[str, Any]], Any]]]:
    """A hosted child's command table, imported once the child is in the sandbox (forked: one
    thread; spawned afresh: before torch's import starts others)."""
    from kernelwright.judge import sandbox

    module = os.environ.pop(COMMANDS_ENV, "")
    if not module.startswith("kernelwright."):
        raise SystemExit(f"a hosted child needs {COMMANDS_ENV} to name a kernelwright module, got {module!r}")
    sandbox.enter_spawned()
    return importlib.import_module(module).handlers


def main(argv: list[str]) -> int:
    _private_sys_path()
    global _STDIN, _readline
    role, fd = argv[1], int(argv[2])
    _STDIN, _readline = sys.stdin, type(sys.stdin).readline
    key = bytes.fromhex(_readline(_STDIN).strip())
    writer = Writer(fd, key)
    del key
    if role == "reference":
        from kernelwright.judge.child_reference import handlers
    elif role == "hosted":
        handlers = _hosted()
    else:
        if not FORK_STEPS:  # spawned afresh: confined before torch's import starts threads (judge.sandbox)
            from kernelwright.judge import sandbox

            sandbox.enter_spawned()
        from kernelwright.judge.child_candidate import handlers
    window.note_hooks(fd)
    serve(handlers(), writer)
    return 0


if __name__ == "__main__":
    # Run the package's copy of this module, so that the handlers' CommandError is the class caught here.
    from kernelwright.judge import child as _package_copy

    sys.exit(_package_copy.main(sys.argv))
