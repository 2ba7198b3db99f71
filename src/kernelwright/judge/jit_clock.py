"""In the candidate child: a clock on Triton's just-in-time work, reported apart from the timed calls.

A candidate's @triton.jit kernels compile at their first launch with each new signature, and an
@triton.autotune kernel benchmarks its configurations at the first launch with each new key. Both
happen inside the child's first calls (the correctness cases, the warm-up), never inside a timed
call that the warm-up reached first; the verdict's `jit` field says how long they took. With the
per-candidate cache (judge.extension.triton_env) a second verdict of the same files loads the
compiled kernels and the autotuning results from disk, and its `jit` shows it.

The figures are the candidate process's own report: code of the candidate's could change them, so
they are printed, never used to decide anything (judge.replies checks their form).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

TOTALS: dict[str, Any] = {"compiles": 0, "compile_s": 0.0, "configs_benchmarked": 0, "autotune_s": 0.0}
_WATCHED: set[int] = set()


def report() -> dict[str, Any] | None:
    """The totals so far (seconds rounded to ms), or None when nothing of Triton's is watched."""
    if not _WATCHED:
        return None
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in TOTALS.items()}


def watch(code_root: str) -> int:
    """Time every compile of the @triton.jit functions, and every configuration benchmark of the
    @triton.autotune ones, that the candidate's modules (those whose file lies under `code_root`)
    hold at their top level; how many functions are watched. Nothing when Triton is not imported."""
    if "triton" not in sys.modules:
        return 0
    try:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction
    except ImportError:  # a Triton without these names: nothing is timed, and `jit` stays null
        return 0
    roots = tuple({os.path.join(code_root, ""), os.path.join(os.path.realpath(code_root), "")})
    for module in list(sys.modules.values()):  # thousands with torch: a prefix test each, no system call
        try:
            path = getattr(module, "__file__", None)
            if not isinstance(path, str) or not path.startswith(roots):
                continue
            for value in list(vars(module).values()):
                _watch_chain(value, JITFunction, Autotuner)
        except Exception:  # noqa: BLE001 - a module or object that misbehaves is not timed
            continue
    return len(_WATCHED)


def _watch_chain(value: Any, jit_cls: type, autotuner_cls: type) -> None:
    """Follow an autotune/heuristics wrapper's `.fn` down to its JITFunction, timing each level."""
    for _ in range(8):
        if id(value) in _WATCHED:
            return
        if isinstance(value, jit_cls):
            # _do_compile: where a launch with a new signature compiles or loads from the cache (Triton 3.6
            # and 3.9 alike). Not `compile`, which Triton sets on the instance only at its first launch.
            do_compile = getattr(value, "_do_compile", None)
            if callable(do_compile):
                value._do_compile = _timed(do_compile, "compiles", "compile_s")
                _WATCHED.add(id(value))
            return
        if isinstance(value, autotuner_cls):
            bench = getattr(value, "_bench", None)
            if callable(bench):
                value._bench = _timed(bench, "configs_benchmarked", "autotune_s")
                _WATCHED.add(id(value))
        value = getattr(value, "fn", None)
        if value is None:
            return


def _timed(fn: Any, count: str, seconds: str) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TOTALS[count] += 1
            TOTALS[seconds] += time.perf_counter() - t0

    return timed
