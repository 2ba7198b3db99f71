"""`kernelwright check`'s exit codes (and `eval --exit-status`'s): one per kind of outcome, so a
script or coding agent can act on the code alone. 0, 1 and 2 keep their meanings from the rest of
the command line."""

from __future__ import annotations

import enum
from typing import Any


class Exit(enum.IntEnum):
    """What a check's exit code says."""

    OK = 0  # correct (and timed, unless --quick)
    FAILURE = 1  # kernelwright or the judge itself failed (infra_error); try again
    USAGE = 2  # not in a workspace, bad flags, no model_new.py, or the reference was changed
    COMPILE_ERROR = 3  # the kernels or model_new.py did not build
    INCORRECT = 4  # wrong output on some secret input
    RUNTIME_ERROR = 5  # the candidate crashed or timed out
    REJECTED = 6  # a guard of the judge refused it (torch compute, precision, timing tricks, ...)
    SANITIZER = 7  # --final on a GPU: correct, but compute-sanitizer found memory or race errors


EXIT_CODES = {
    Exit.OK.value: "correct (and timed, unless --quick)",
    Exit.FAILURE.value: "kernelwright or the judge itself failed (infra_error): nothing is known about the candidate",
    Exit.USAGE.value: "usage: not in a workspace, bad flags, no model_new.py, or the reference was edited",
    Exit.COMPILE_ERROR.value: "the kernels or model_new.py did not build",
    Exit.INCORRECT.value: "wrong output on some secret input",
    Exit.RUNTIME_ERROR.value: "the candidate crashed or ran past its time limit",
    Exit.REJECTED.value: "a guard of the judge refused the candidate (torch compute, precision, timing tricks, ...)",
    Exit.SANITIZER.value: "--final on a GPU: correct, but compute-sanitizer found errors",
}

BY_STATUS = {
    "correct": Exit.OK, "infra_error": Exit.FAILURE, "compile_error": Exit.COMPILE_ERROR, "incorrect": Exit.INCORRECT,
    "runtime_error": Exit.RUNTIME_ERROR, "timeout": Exit.RUNTIME_ERROR, "rejected": Exit.REJECTED,
}


def for_status(status: str) -> Exit:
    """The exit code for a verdict status."""
    if status not in BY_STATUS:
        raise ValueError(f"unknown verdict status {status!r}")
    return BY_STATUS[status]


def sanitizer_errors(verdict: dict[str, Any]) -> list[str]:
    """'<tool> <count>' for every compute-sanitizer tool that found errors."""
    tools = (verdict.get("sanitizer") or {}).get("tools") or []
    return [f"{t.get('tool')} {t['errors']}" for t in tools if (t.get("errors") or 0) > 0]


def for_verdict(verdict: dict[str, Any], *, sanitized: bool) -> Exit:
    """The exit code for a verdict (Verdict.to_dict()): by status; where the sanitizer was asked
    for (check --final, eval --sanitize), a correct verdict with sanitizer errors is SANITIZER."""
    code = for_status(verdict["status"])
    if sanitized and code == Exit.OK and sanitizer_errors(verdict):
        return Exit.SANITIZER
    return code
