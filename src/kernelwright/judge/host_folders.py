"""Whether the host's folders let a sandboxed uid reach its working folder (judge.sandbox's uid layer).

A uid of no account, with no groups, gets a folder's `other` bits. access(2), which nvcc, g++ and
Triton ask of TMPDIR, counts no capability (CAP_DAC_READ_SEARCH, kept under Landlock, does not
help there), so a folder without o+x above a confined process's working folder leaves it no TMPDIR:
a compiler falls back to /tmp, which Landlock refuses, and an honest candidate would get a
compile_error. The judge looks itself, before a compiler, a tool or a candidate child starts, and
stops with HostFault (the verdict's `infra_error`) naming the folder to open.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path


class HostFault(OSError):
    """The host keeps the sandbox from working as planned (a folder above a confined process's
    working folder closed to its uid): no candidate code has run, and the verdict is the judge's."""


def closed_above(path: str | Path) -> str:
    """The topmost folder above `path` that a uid of no account cannot traverse (no search bit
    for others, or one that cannot be looked at), '' when there is none."""
    closed = ""
    for folder in Path(os.path.realpath(path)).parents:
        try:
            mode = os.stat(folder).st_mode
        except OSError:
            return str(folder)
        if not mode & stat.S_IXOTH:
            closed = str(folder)
    return closed


def refuse_closed(layers: Sequence[str], path: str | Path, what: str) -> None:
    """Raise HostFault when `layers` switch uids and a folder above `path` is closed to them."""
    if "uid" not in layers:
        return
    closed = closed_above(path)
    if closed:
        raise HostFault(f"{what} {path} is below {closed}, which a sandboxed uid cannot traverse: every folder above it "
                        f"must be traversable by others (chmod o+x {closed}, or set TMPDIR to a folder below open ones)")
