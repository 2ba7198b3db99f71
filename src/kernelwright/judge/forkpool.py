"""The judge's side of the fork server (judge.forkserver): start it once, ask it for children.

One server per judge process and import-time environment, started on first use and kept for the
process's lifetime (`optimize`, `bench`, the tests and `serve` judge many candidates). A child it
forks behaves like a spawned one (judge.workers): its own session, stdin for commands, the log for
its output, the authenticated result pipe. `KERNELWRIGHT_FORKSERVER=0` spawns every child afresh
instead, as does a server that failed to start (said once in the log).

Processes that start one after another (a script calling `kernelwright check` in a loop, the test
suite's CLI runs) can share one server: `python -m kernelwright.judge.forkserver --listen PATH`
serves every judge of this user whose KERNELWRIGHT_FORKSERVER_SOCKET names PATH and whose
import-time environment matches its own; the others start their own.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernelwright.judge import sandbox
from kernelwright.judge.forkserver import OPTIONAL_ENV

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 600.0  # a loaded 2-core machine took minutes to import torch
# Variables read when torch and the judge's modules are imported: a server started under other
# values would give its children a different torch. Everything else reaches the child at fork.
IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "TORCH", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "NVIDIA_", "TRITON_", "CUDA_")
SHARED_ENV = "KERNELWRIGHT_FORKSERVER_SOCKET"  # a shared server's socket (`python -m kernelwright.judge.forkserver --listen PATH`)
# TORCHINDUCTOR_CACHE_DIR is read when the inductor compiles; the inductor itself writes it into the
# environment the first time it does (its default), which must not make the process a stranger.
CALL_TIME = frozenset({"PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", "TORCH_EXTENSIONS_DIR", "KINETO_LOG_LEVEL", "TORCHINDUCTOR_CACHE_DIR",
                       SHARED_ENV})


def absolute_pythonpath(env: dict[str, str]) -> dict[str, str]:
    """env with each PYTHONPATH entry made absolute against the judge's working directory. The
    judge's processes start elsewhere (the fork server in /, children in their work directory), so
    `PYTHONPATH=src python3 -m kernelwright ...` from a checkout would otherwise leave them unable to
    import kernelwright: every verdict an infra_error (seen with benchmarks/memory_bench.py)."""
    value = env.get("PYTHONPATH")
    if value:
        env = {**env, "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in value.split(os.pathsep) if p)}
    return env


class ForkServerError(RuntimeError):
    """The fork server could not start or answer."""


def enabled() -> bool:
    return os.environ.get("KERNELWRIGHT_FORKSERVER", "1").strip().lower() not in ("0", "false", "no", "off")


def import_env_key(env: dict[str, str] | None = None) -> tuple[Any, ...]:
    """What a server's children inherit from its start: the interpreter, the import-time
    variables and the judge's code as it is on disk (a shared server started before an edit
    would fork children with the old code)."""
    env = sandbox.clean_env(os.environ if env is None else env)
    picked = tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in CALL_TIME))
    return (sys.executable, picked, _CODE)


def _code_stamp() -> str:
    """The judge's and the runtime's files as this process imported them (read once, at import)."""
    here = Path(__file__).resolve().parent
    stamps = []
    for folder in (here, here.parent / "runtime"):
        for f in sorted(folder.glob("*.py")):
            try:
                stamps.append(f"{f.name}:{f.stat().st_mtime_ns}")
            except OSError:
                continue
    return f"{here.parent}|{hashlib.sha256(' '.join(stamps).encode()).hexdigest()[:16]}"


_CODE = _code_stamp()


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

    def __init__(self, optional_imports: bool = True, shared: str | None = None) -> None:
        """Start a server of this process's own, or (`shared`: its socket path) connect to one that
        serves every judge of this user (ConnectionError when none listens there)."""
        self._lock = threading.Lock()  # one spawn request on the socket at a time
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._codes: dict[int, int] = {}
        self._next_id = 0
        self.ready: dict[str, Any] | None = None
        self.lost = False
        self.cuda_touched = ""  # the optional import that initialised CUDA, when one did (the server then refused)
        self.optional_imports = optional_imports
        self.shared = shared
        self._proc: subprocess.Popen | None = None
        if shared is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._sock.connect(shared)
                _same_user(self._sock, shared)
            except OSError:
                self._sock.close()
                raise
        else:
            self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            # the allow-listed environment (judge.sandbox): every child inherits the server's memory
            env = absolute_pythonpath(dict(sandbox.clean_env(os.environ), PYTHONUNBUFFERED="1", **({} if optional_imports else {OPTIONAL_ENV: "0"})))
            self._proc = subprocess.Popen([sys.executable, "-m", "kernelwright.judge.forkserver", str(theirs.fileno())],
                                          pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True)
            theirs.close()
        self.started = time.monotonic()
        threading.Thread(target=self._read, name="kw-forkserver", daemon=True).start()

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc is not None else int((self.ready or {}).get("pid") or 0)

    def gone(self) -> bool:
        return self.lost or (self._proc is not None and self._proc.poll() is not None)

    def _read(self) -> None:
        try:
            while True:
                try:
                    data = self._sock.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    break
                self._take(json.loads(data))
        except (ValueError, TypeError) as exc:
            log.warning("the fork server sent a malformed message: %s", exc)
        finally:
            with self._cond:
                self.lost = True
                self._cond.notify_all()

    def _take(self, msg: dict[str, Any]) -> None:
        with self._cond:
            if "ready" in msg:
                self.ready = msg
                self.cuda_touched = str(msg.get("cuda_touched") or "")
            elif "exit" in msg:
                self._codes[int(msg["exit"])] = int(msg["code"])
            else:
                if "pid" in msg:
                    self._codes.pop(int(msg["pid"]), None)  # a reused pid: the exit recorded is an earlier child's
                self._replies[int(msg.get("id") or -1)] = msg
            self._cond.notify_all()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        with self._cond:
            self._cond.wait_for(lambda: self.ready is not None or self.lost, timeout_s)
            ready = self.ready
        if not ready or not ready.get("ready"):
            why = (ready or {}).get("error") or ("it exited" if self.lost else f"not ready after {timeout_s:g} s")
            raise ForkServerError(f"the fork server did not start: {why}")
        return ready

    def spawn(self, *, role: str, env: dict[str, str], cwd: Path, log_fd: int, result_fd: int) -> Forked:
        """Fork a judge child; its output goes to `log_fd` and its result pipe's write end is
        `result_fd` (the caller keeps and closes its copies of both)."""
        stdin_r, stdin_w = os.pipe()
        log_fd = os.dup(log_fd)
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
        if self._proc is None:
            return  # a shared server goes on serving others
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def _same_user(sock: socket.socket, path: str) -> None:
    """Refuse a shared server run by another user, or one whose folder others can enter: the
    children's stdin (the channel key) goes to it."""
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    folder = os.stat(os.path.dirname(path) or ".")
    if uid != os.getuid() or folder.st_uid != os.getuid() or folder.st_mode & 0o077:
        raise PermissionError(f"{path}: the fork server there is not this user's alone (uid {uid}, folder mode {oct(folder.st_mode & 0o777)})")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


_servers: dict[tuple[Any, ...], ForkServer] = {}
_failed: set[tuple[Any, ...]] = set()
_no_optional: set[tuple[Any, ...]] = set()  # environments whose server initialised CUDA in an optional import
_no_shared: set[tuple[Any, ...]] = set()  # environments the shared server does not serve (or is not there for)
_registry_lock = threading.Lock()


def server() -> ForkServer | None:
    """This process's fork server for the current environment: the shared one that
    KERNELWRIGHT_FORKSERVER_SOCKET names when it listens and was started under the same
    import-time environment, else one of this process's own (started now if need be); None when
    disabled or when one failed to start here before."""
    if not enabled():
        return None
    key = import_env_key()
    with _registry_lock:
        if key in _failed:
            return None
        srv = _servers.get(key)
        if srv is not None and srv.gone():
            log.warning("the fork server (pid %s) is gone; starting another", srv.pid)
            srv = None
        if srv is None:
            srv = _servers[key] = _shared(key) or ForkServer(key not in _no_optional)
        return srv


def _shared(key: tuple[Any, ...]) -> ForkServer | None:
    """A connection to the shared server, when there is one for this environment."""
    path = os.environ.get(SHARED_ENV)
    if not path or key in _no_shared:
        return None
    try:
        srv = ForkServer(shared=path)
        hello = srv.wait_ready(10.0)
    except (OSError, ForkServerError) as exc:
        (log.warning if "sandboxed" in str(exc) else log.info)("no shared fork server at %s (%s); starting one of this process's own", path, exc)
        _no_shared.add(key)
        return None
    if hello.get("key") != repr(key):
        log.info("the shared fork server at %s was started under another environment; starting one of this process's own", path)
        _no_shared.add(key)
        srv.close()
        return None
    return srv


def state() -> str:
    """This process's fork server for the current environment: "off", "failed", "none" (not
    started), "starting" or "ready" (the service's health check reports it)."""
    if not enabled():
        return "off"
    key = import_env_key()
    with _registry_lock:
        if key in _failed:
            return "failed"
        srv = _servers.get(key)
    if srv is None or srv.gone():
        return "none"
    if srv.ready is None:
        return "failed" if srv.lost else "starting"
    return "ready" if srv.ready.get("ready") else "failed"


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
                if srv.shared:
                    _no_shared.add(key)  # this process starts one of its own next
                elif srv.cuda_touched and key not in _no_optional:
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
