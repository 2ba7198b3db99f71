"""Unix sockets that only this user can reach, at a path the user gives (`kernelwright serve
--socket`, the fork server's `--listen`). A folder the user named is never changed: one that does
not exist is made private (0700); one that exists must already be this user's alone, else the
path is refused. So a socket asked for in /tmp is refused, not made private by closing /tmp to
every other user (and to the judge's sandboxed uids, whose folders live there)."""

from __future__ import annotations

import errno
import os
import socket
import stat


def private_folder(path: str) -> None:
    """The folder of socket `path` (as bind will resolve it: the path's own text, symlinks
    followed), made 0700 when this call creates it; an existing one must be a folder of this
    user's that others cannot enter (PermissionError otherwise)."""
    folder = os.path.dirname(path) or "."
    parent = os.path.dirname(folder.rstrip(os.sep))
    if parent:
        os.makedirs(parent, exist_ok=True)  # the path's own text, step by step as bind will walk it (symlinks, `..`)
    try:
        os.mkdir(folder, 0o700)  # 0700 less the umask: never wider; never a chmod of what was there
    except FileExistsError:
        pass
    st = os.stat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{os.path.abspath(folder)} is not a folder of this user's alone (owner uid {st.st_uid}, mode "
                              f"{oct(st.st_mode & 0o7777)}): give a socket path in a folder only you can enter, or one that does not exist yet")


def clear_stale(path: str) -> None:
    """Remove a socket left at `path` by a server that is gone (a connection refused); a file that
    is not a socket, or a socket where a connection was not refused (a server there, maybe one too
    busy to accept), is refused (FileExistsError)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(f"{path} exists and is not a socket: give another path")
    for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
        probe = socket.socket(socket.AF_UNIX, kind | socket.SOCK_NONBLOCK)
        try:
            probe.connect(path)
        except FileNotFoundError:
            return  # gone meanwhile
        except OSError as exc:
            if exc.errno == errno.EPROTOTYPE:  # a live socket of another type: try the next type
                continue
            if exc.errno == errno.ECONNREFUSED:  # nobody listens: stale
                break
            raise FileExistsError(f"{path}: a server holds it ({exc.strerror or exc})") from None
        else:
            raise FileExistsError(f"{path}: a server already listens there")
        finally:
            probe.close()
    else:  # live, of a type neither stream nor seqpacket (a datagram socket): not stale
        raise FileExistsError(f"{path}: a live socket of another type is there")
    os.unlink(path)


def bind_private(sock: socket.socket, path: str) -> tuple[int, int, int]:
    """Bind `sock` at `path` as a 0600 socket from its first moment (the mode set on the socket
    before bind, not through the process-wide umask); the file's identity for remove_if_ours
    (device, inode and change time: an inode number is reused once its file is gone)."""
    os.fchmod(sock.fileno(), 0o600)
    sock.bind(path)
    os.chmod(path, 0o600)
    return _identity(os.lstat(path))


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_dev, st.st_ino, st.st_ctime_ns


def remove_if_ours(path: str, ident: tuple[int, int, int] | None) -> None:
    """Remove the socket at `path` only if it is still the one this process bound (`ident`): a
    server started later on the same path keeps its own."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if ident is not None and _identity(st) == ident:
        os.unlink(path)
