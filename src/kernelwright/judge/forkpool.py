"""The judge's side of the fork server (judge.forkserver): start it once, ask it for children.

One server per judge process and import-time environment, started on first use and kept for the
process's lifetime (`optimize`, `bench`, the tests and `serve` judge many candidates). A child it
forks behaves like a spawned one (judge.workers): its own session, stdin for commands, the log for
its output, the authenticated result pipe. `KERNELWRIGHT_FORKSERVER=0` spawns every child afresh
instead, as does a server that failed to start (said once in the log).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernelwright.judge.forkserver import OPTIONAL_ENV

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 600.0  # a loaded 2-core machine took minutes to import torch
# Variables read when torch and the judge's modules are imported: a server started under other
# values would give its children a different torch. Everything else reaches the child at fork.
IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "TORCH", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "NVIDIA_", "TRITON_", "CUDA_")
CALL_TIME = frozenset({"PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", "TORCH_EXTENSIONS_DIR", "KINETO_LOG_LEVEL"})


class ForkServerError(RuntimeError):
    """The fork server could not start or answer."""


def enabled() -> bool:
    return os.environ.get("KERNELWRIGHT_FORKSERVER", "1").strip().lower() not in ("0", "false", "no", "off")


def import_env_key(env: dict[str, str] | None = None) -> tuple[Any, ...]:
    env = dict(os.environ) if env is None else env
    picked = tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in CALL_TIME))
    return (sys.executable, picked)


class Forked:
    """A forked child as the judge sees it: what judge.workers uses of subprocess.Popen."""

    def __init__(self, pid: int, stdin_fd: int, server: "ForkServer") -> None:
        self.pid = pid
        self.stdin = os.fdopen(stdin_fd, "wb")
        self._server = server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout or 0.0)
            self._server.wait_exit(self.pid, 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic())))
        return self.returncode  # type: ignore[return-value]


class ForkServer:
    """A running fork server and the thread that reads its answers."""

    def __init__(self, optional_imports: bool = True) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self._lock = threading.Lock()  # one spawn request on the socket at a time
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._codes: dict[int, int] = {}
        self._next_id = 0
        self.ready: dict[str, Any] | None = None
        self.lost = False
        self.cuda_touched = ""  # the optional import that initialised CUDA, when one did (the server then refused)
        self.optional_imports = optional_imports
        env = dict(os.environ, PYTHONUNBUFFERED="1", **({} if optional_imports else {OPTIONAL_ENV: "0"}))
        self._proc = subprocess.Popen([sys.executable, "-m", "kernelwright.judge.forkserver", str(theirs.fileno())],
                                      pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True)
        theirs.close()
        self.started = time.monotonic()
        threading.Thread(target=self._read, name="kw-forkserver", daemon=True).start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            msg = json.loads(data)
            with self._cond:
                if "ready" in msg:
                    self.ready = msg
                    self.cuda_touched = str(msg.get("cuda_touched") or "")
                elif "exit" in msg:
                    self._codes[int(msg["exit"])] = int(msg["code"])
                else:
                    self._replies[int(msg.get("id") or -1)] = msg
                self._cond.notify_all()
        with self._cond:
            self.lost = True
            self._cond.notify_all()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        with self._cond:
            self._cond.wait_for(lambda: self.ready is not None or self.lost, timeout_s)
            ready = self.ready
        if not ready or not ready.get("ready"):
            why = (ready or {}).get("error") or ("it exited" if self.lost else f"not ready after {timeout_s:g} s")
            raise ForkServerError(f"the fork server did not start: {why}")
        return ready

    def spawn(self, *, role: str, env: dict[str, str], cwd: Path, log_path: Path, result_fd: int) -> Forked:
        """Fork a judge child; its result pipe's write end is `result_fd` (the caller closes its copy)."""
        stdin_r, stdin_w = os.pipe()
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with self._lock:
                self._next_id += 1
                rid = self._next_id
                request = json.dumps({"id": rid, "role": role, "env": env, "cwd": str(cwd)}).encode()
                socket.send_fds(self._sock, [request], [stdin_r, log_fd, result_fd])
            reply = self._reply(rid)
        except (OSError, ForkServerError):
            os.close(stdin_w)
            raise
        finally:
            os.close(stdin_r)
            os.close(log_fd)
        return Forked(int(reply["pid"]), stdin_w, self)

    def _reply(self, rid: int) -> dict[str, Any]:
        self.wait_ready()
        with self._cond:
            self._cond.wait_for(lambda: rid in self._replies or self.lost, 60)
            reply = self._replies.pop(rid, None)
        if reply is None or "pid" not in reply:
            raise ForkServerError(f"the fork server did not fork the child: {(reply or {}).get('error') or 'no answer'}")
        return reply

    def exit_code(self, pid: int) -> int | None:
        """The child's exit code once the server reaped it; None while it runs. A child whose
        server is gone was reaped by init: it counts as killed once its /proc entry is gone."""
        with self._cond:
            if pid in self._codes:
                return self._codes[pid]
            lost = self.lost
        if lost and not _alive(pid):
            return -9
        return None

    def wait_exit(self, pid: int, timeout_s: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._codes or self.lost, timeout_s)

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


_servers: dict[tuple[Any, ...], ForkServer] = {}
_failed: set[tuple[Any, ...]] = set()
_no_optional: set[tuple[Any, ...]] = set()  # environments whose server initialised CUDA in an optional import
_registry_lock = threading.Lock()


def server() -> ForkServer | None:
    """This process's fork server for the current environment (started now if need be), or None
    when disabled or when it failed to start here before."""
    if not enabled():
        return None
    key = import_env_key()
    with _registry_lock:
        if key in _failed:
            return None
        srv = _servers.get(key)
        if srv is not None and (srv.lost or srv._proc.poll() is not None):
            log.warning("the fork server (pid %s) is gone; starting another", srv.pid)
            srv = None
        if srv is None:
            srv = _servers[key] = ForkServer(key not in _no_optional)
        return srv


def warm_up() -> None:
    """Start the fork server in the background now (its torch import overlaps other work)."""
    try:
        server()
    except OSError as exc:
        log.warning("could not start the fork server: %s", exc)


def mark_failed(srv: ForkServer, why: str) -> None:
    """Stop using a server that failed. One whose optional import initialised CUDA is replaced by
    one without optional imports; otherwise children are spawned afresh for this environment."""
    with _registry_lock:
        for key, s in list(_servers.items()):
            if s is srv:
                del _servers[key]
                if srv.cuda_touched and key not in _no_optional:
                    _no_optional.add(key)
                else:
                    _failed.add(key)
    if srv.cuda_touched:
        log.warning("%s; the next fork server skips that import", why)
    else:
        log.warning("%s; judge children are spawned afresh instead (slower)", why)
    srv.close()


@atexit.register
def shutdown() -> None:
    """Close every fork server of this process (their children end when their stdin closes)."""
    with _registry_lock:
        servers = list(_servers.values())
        _servers.clear()
    for srv in servers:
        srv.close()
