"""Sockets only this user can reach (core.sockets), as `kernelwright serve --socket` and the fork
server's --listen make them: a folder the user named is never changed, a shared one is refused,
and nothing but a stale socket is ever removed."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from kernelwright.client.service import make_server
from kernelwright.core.sockets import clear_stale, private_folder
from kernelwright.judge.forkserver import _listener


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("listen", ["service", "forkserver"])
def test_a_socket_in_a_shared_folder_is_refused_and_the_folder_keeps_its_mode(tmp_path, listen):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # as /tmp
    path = shared / "judge.sock"
    with pytest.raises(PermissionError, match="alone"):
        if listen == "service":
            make_server(None, socket_path=path)
        else:
            _listener(str(path))
    assert _mode(shared) == 0o1777 and not path.exists()


@pytest.mark.parametrize("listen", ["service", "forkserver"])
def test_a_new_folder_is_made_private_and_the_socket_is_the_users_alone(tmp_path, listen):
    path = tmp_path / "new" / "deeper" / "judge.sock"
    if listen == "service":
        server, url = make_server(None, socket_path=path)
        server.server_close()
    else:
        _listener(str(path)).close()
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
