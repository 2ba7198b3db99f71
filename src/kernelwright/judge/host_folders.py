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


def closed_above(path: str | Path) -> list[str]:
    """The folders above `path` that a uid of no account cannot traverse (no search bit for
    others, or one that cannot be looked at), topmost first; [] when there is none. Both the path
    as written (a compiler walks it so, through any link in it) and as resolved count."""
    folders = {*Path(os.path.abspath(path)).parents, *Path(os.path.realpath(path)).parents}
    closed = []
    for folder in folders:
        try:
            mode = os.stat(folder).st_mode  # through a link: what a walk through it meets
        except OSError:
            closed.append(folder)
            continue
        if not mode & stat.S_IXOTH:
            closed.append(folder)
    return [str(f) for f in sorted(closed, key=lambda f: (len(f.parts), str(f)))]


def refuse_closed(layers: Sequence[str], path: str | Path, what: str) -> None:
    """Raise HostFault when `layers` switch uids and a folder above `path` is closed to them."""
    if "uid" not in layers:
        return
    closed = closed_above(path)
    if closed:
        names = ", ".join(closed)
        raise HostFault(f"{what} {path} is below {names}, which a sandboxed uid cannot traverse: every folder above it "
                        f"must be traversable by others (chmod o+x {' '.join(closed)}, or set TMPDIR to a folder below open ones)")
