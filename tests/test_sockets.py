"""Sockets only this user can reach (core.sockets), as `kernelwright serve --socket` and the fork
server's --listen make them: a folder the user named is never changed, a shared one is refused,
and nothing but a stale socket is ever removed."""

from __future__ import annotations

import os
import socket
import stat
import time

import pytest

from kernelwright.client.service import make_server
from kernelwright.core.sockets import bind_private, clear_stale, private_folder, remove_if_ours
from kernelwright.judge.forkserver import _listener


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("listen", ["service", "forkserver"])
@pytest.mark.parametrize("mode", [0o1777, 0o755, 0o710])
def test_a_socket_in_a_folder_others_can_enter_is_refused_and_the_folder_keeps_its_mode(tmp_path, listen, mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)  # 1777 as /tmp
    path = shared / "judge.sock"
    with pytest.raises(PermissionError, match="alone"):
        if listen == "service":
            make_server(None, socket_path=path)
        else:
            _listener(str(path))
    assert _mode(shared) == mode and not path.exists()


def test_the_folder_checked_is_the_one_bind_resolves(tmp_path):
    """mine/link/../judge.sock, link -> shared/sub: bind lands in shared, so shared is what is checked."""
    mine, shared = tmp_path / "mine", tmp_path / "shared"
    mine.mkdir(mode=0o700)
    (shared / "sub").mkdir(parents=True)
    os.chmod(shared, 0o1777)
    (mine / "link").symlink_to(shared / "sub")
    with pytest.raises(PermissionError, match="alone"):
        private_folder(str(mine / "link" / ".." / "judge.sock"))
    assert _mode(shared) == 0o1777
    private_folder(str(mine / "link" / ".." / "n1" / "n2" / "judge.sock"))  # made where bind will look: below shared
    assert _mode(shared / "n1" / "n2") == 0o700 and not (mine / "n1").exists()


@pytest.mark.parametrize("listen", ["service", "forkserver"])
def test_a_new_folder_is_made_private_and_the_socket_is_the_users_alone(tmp_path, listen):
    path = tmp_path / "new" / "deeper" / "judge.sock"
    old = os.umask(0)  # the socket is 0600 by its own mode, whatever the umask
    try:
        if listen == "service":
            server, url = make_server(None, socket_path=path)
            server.server_close()
        else:
            _listener(str(path)).close()
    finally:
        os.umask(old)
    assert _mode(path.parent) == 0o700 and stat.S_ISSOCK(os.lstat(path).st_mode) and _mode(path) == 0o600
    private_folder(str(path))  # an existing private folder is fine


def test_only_a_stale_socket_is_removed(tmp_path):
    os.chmod(tmp_path, 0o700)
    kept = tmp_path / "notes.txt"
    kept.write_text("mine")
    with pytest.raises(FileExistsError, match="not a socket"):
        make_server(None, socket_path=kept)
    assert kept.read_text() == "mine"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(tmp_path / "live.sock"))
    live.listen()
    try:
        with pytest.raises(FileExistsError, match="already listens"):
            clear_stale(str(tmp_path / "live.sock"))
        assert (tmp_path / "live.sock").exists()
    finally:
        live.close()
    clear_stale(str(tmp_path / "live.sock"))  # nobody answers now: stale, removed
    assert not (tmp_path / "live.sock").exists()
    clear_stale(str(tmp_path / "absent.sock"))  # nothing there: nothing to do


@pytest.mark.parametrize("kind", ["seqpacket", "busy", "datagram"])
def test_a_server_there_keeps_its_socket(tmp_path, kind):
    """The fork server's kind of socket, a stream server too busy to accept (its backlog full: a
    connect that is not refused) and a live datagram socket are not stale sockets."""
    path = str(tmp_path / "s.sock")
    types = {"seqpacket": socket.SOCK_SEQPACKET, "busy": socket.SOCK_STREAM, "datagram": socket.SOCK_DGRAM}
    server = socket.socket(socket.AF_UNIX, types[kind])
    server.bind(path)
    if kind != "datagram":
        server.listen(0 if kind == "busy" else 8)
    waiting = []
    try:
        if kind == "busy":
            while True:  # fill the backlog: then a connect would block, not be refused
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                try:
                    c.connect(path)
                except BlockingIOError:
                    c.close()
                    break
                waiting.append(c)
        with pytest.raises(FileExistsError, match="server"):
            clear_stale(path)
        assert os.path.exists(path)
    finally:
        for c in waiting:
            c.close()
        server.close()


def test_a_server_removes_only_its_own_socket(tmp_path):
    path = str(tmp_path / "s.sock")
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ours = bind_private(first, path)
    first.close()
    clear_stale(path)  # the first server is gone; a second binds the path (later than one tick of the file times' clock)
    time.sleep(0.05)
    second = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs = bind_private(second, path)
    try:
        remove_if_ours(path, ours)  # the first server's exit: not its socket any more
        assert os.path.exists(path)
        remove_if_ours(path, theirs)
        assert not os.path.exists(path)
    finally:
        second.close()
