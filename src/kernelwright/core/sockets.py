"""Unix sockets that only this user can reach, at a path the user gives (`kernelwright serve
--socket`, the fork server's `--listen`). A folder the user named is never changed: one that does
not exist is made private (0700); one that exists must already be this user's alone, else the
path is refused. So a socket asked for in /tmp is refused, not made private by closing /tmp to
every other user (and to the judge's sandboxed uids, whose folders live there)."""

from __future__ import annotations

import os
import socket
import stat
from contextlib import contextmanager
from typing import Iterator


def private_folder(path: str) -> None:
    """The folder of socket `path`, made 0700 when this call creates it; an existing one must be a
    folder of this user's that others cannot enter (PermissionError otherwise)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)  # makedirs' mode is masked by the umask
        st = os.stat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{folder} is not a folder of this user's alone (owner uid {st.st_uid}, mode {oct(st.st_mode & 0o7777)}): "
                              "give a socket path in a folder only you can enter, or one that does not exist yet")


def clear_stale(path: str) -> None:
    """Remove a socket left at `path` by a server that is gone; a file that is not a socket, or a
    socket a server still answers on, is refused (FileExistsError)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(f"{path} exists and is not a socket: give another path")
    for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
        probe = socket.socket(socket.AF_UNIX, kind)
        try:
            probe.settimeout(1.0)
            probe.connect(path)
        except OSError:
            continue
        else:
            raise FileExistsError(f"{path}: a server already listens there")
        finally:
            probe.close()
    os.unlink(path)


@contextmanager
def owner_only() -> Iterator[None]:
    """A umask of 0177 while a socket is bound, so that it is 0600 from its first moment (the
    umask is the process's: bind at start-up, before other threads make files)."""
    old = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(old)
