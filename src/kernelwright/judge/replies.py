"""The form of a candidate child's replies, checked before the judge reads them.

A candidate's code shares its child's process and can write any reply (judge.channel), so a field
of the wrong form must end as a forged reply (`rejected`), never as a crash of the judge's own
code (`infra_error`, which a trainer may retry instead of penalising). Fields not listed here are
either checked where they are read (the timing batches' times, judge.measure) or only printed.
"""

from __future__ import annotations

import math
from typing import Any, Callable


def _num(x: Any) -> bool:
    try:
        return type(x) in (int, float) and math.isfinite(x)
    except OverflowError:
        return False


def _list_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(ok(x) for x in v)


def _row(*kinds: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and len(v) == len(kinds) and all(k(x) for k, x in zip(kinds, v))


def _str(x: Any) -> bool:
    return isinstance(x, str)


def _int(x: Any) -> bool:
    return type(x) is int


def seconds_value(x: Any) -> bool:
    """A number of seconds a progress line may print: finite and at most a day either way."""
    return _num(x) and abs(x) <= 86400


FORMS: dict[str, Callable[[Any], bool]] = {
    "ops": lambda v: isinstance(v, dict) and all(_str(k) and _int(n) for k, n in v.items()),  # operator -> count
    "threads": _list_of(_str),
    "identities_moved": _list_of(_str),
    "inputs_changed": _list_of(_int),
    "flags_changed": lambda v: isinstance(v, dict),
    "handover": lambda v: v is None or isinstance(v, dict),  # its contents: the reference child's business
    "profiler_ms": _num,
    "kernels": _list_of(_row(_str, _num)),  # [name, ms]
    "activities": _list_of(_row(_str, _num, lambda s: s is None or _int(s) or _str(s))),  # [name, ms, stream]
    "per_call_ms": _num,
    "warmup_calls": _int,
    "child_seconds": lambda v: isinstance(v, dict) and len(v) <= 8 and all(_str(k) and seconds_value(x) for k, x in v.items()),  # printed
    "digest": _str,  # how the input check digests: "native", "off" or why the torch fallback (printed in step inputs_unchanged)
    "memory_mib": _row(_int, _int, _int, _int, _int, _int),  # popped and printed at debug only (judge.workers.memory)
    # Triton's just-in-time work so far (judge.jit_clock): counts and seconds, printed in the verdict's `jit` only; room for keys to come
    "jit": lambda v: isinstance(v, dict) and len(v) <= 12 and all(
        _str(k) and len(k) <= 32 and ((_int(x) and 0 <= x < 10**9) or (type(x) is float and seconds_value(x) and x >= 0)) for k, x in v.items()),
}


def malformed(result: dict[str, Any]) -> str:
    """The first field of a candidate child's result whose form is wrong; empty when none is."""
    for key, ok in FORMS.items():
        if key in result and not ok(result[key]):
            return key
    return ""
