"""Whether the host's folders let a sandboxed uid reach its working folder (judge.sandbox's uid layer).

A uid of no account, with no groups, gets a folder's `other` bits. access(2), which nvcc, g++ and
Triton ask of TMPDIR, counts no capability (CAP_DAC_READ_SEARCH, kept under Landlock, does not
help there), so a folder without o+x above a confined process's working folder leaves it no TMPDIR:
a compiler falls back to /tmp, which Landlock refuses, and an honest candidate would get a
compile_error. The judge looks itself, before a compiler, a tool or a candidate child starts, and
stops with HostFault (the verdict's `infra_error`) naming the folder to open.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path


class HostFault(OSError):
    """The host keeps the sandbox from working as planned (a folder above a confined process's
    working folder closed to its uid): no candidate code has run, and the verdict is the judge's."""


LINK_HOPS = 40  # as the kernel's limit on links followed in one walk (ELOOP past it)


def walked(path: str | Path) -> list[str]:
    """The folders a walk to `path` searches, in order, as the kernel resolves it: each folder that
    holds the next component, through every link where it is met (a chain, a relative target, a
    `..` after a link) and never lexically; `path` itself is not searched."""
    searched: list[str] = []
    hops = 0

    def walk(start: str, text: str) -> str:
        nonlocal hops
        here = "/" if text.startswith("/") else start
        for part in text.split("/"):
            if part in ("", "."):
                continue
            if here not in searched:
                searched.append(here)
            if part == "..":
                here = os.path.dirname(here) or "/"
                continue
            step = os.path.join(here, part)
            if os.path.islink(step):
                hops += 1
                if hops > LINK_HOPS:
                    raise OSError(errno.ELOOP, f"more than {LINK_HOPS} links on the way to {path}")
                here = walk(here, os.readlink(step))
            else:
                here = step
        return here

    walk(os.getcwd(), os.fspath(path))
    return searched


def closed_above(path: str | Path) -> list[str]:
    """The folders a walk to `path` searches (walked) that a uid of no account cannot traverse:
    no search bit for others, or one that cannot be looked at (missing included); in walk order,
    [] when there is none."""
    closed = []
    for folder in walked(path):
        try:
            mode = os.stat(folder).st_mode
        except OSError:
            closed.append(folder)
            continue
        if not mode & stat.S_IXOTH:
            closed.append(folder)
    return closed


def refuse_closed(layers: Sequence[str], path: str | Path, what: str) -> None:
    """Raise HostFault when `layers` switch uids and a folder above `path` is closed to them."""
    if "uid" not in layers:
        return
    closed = closed_above(path)
    if closed:
        names = ", ".join(closed)
        raise HostFault(f"{what} {path} is below {names}, which a sandboxed uid cannot traverse (or which is missing): every "
                        f"folder on the way must be traversable by others (chmod o+x {shlex.join(closed)}, or set TMPDIR to a "
                        "folder below open ones)")
