"""The fork server: `python -m kernelwright.judge.forkserver FD`.

A process that has imported torch and the judge's child code, and has never touched CUDA, forks
each judge child on request, so a child starts in milliseconds instead of paying Python's and
torch's start-up. It never runs problem or candidate code itself: a forked child is a fresh process,
used for one role and never reused, and gets its own session, working folder, environment and
descriptors before the child's own code (judge.child.main) runs in it.

The judge talks to it over a unix socket (FD, SOCK_SEQPACKET): a spawn request is one JSON message
carrying three descriptors (the child's stdin, its log, its result pipe); the answer is its pid. When
a child exits the server reaps it and says so ({"exit": pid, "code": returncode}), since the judge is
not its parent. The server exits when the judge's end of the socket closes.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from typing import Any

# Imported once here, before the server says it is ready, and inherited by every child. The optional
# ones take seconds and every reference child needs torch._dynamo (the FLOP counter imports it);
# one that initialises the CUDA driver makes the server refuse, and the judge starts one without them.
PRELOAD = ("torch", "numpy", "kernelwright.judge.child", "kernelwright.judge.child_candidate", "kernelwright.judge.child_reference",
           "kernelwright.judge.reference_checks", "kernelwright.judge.reference_compare", "kernelwright.judge.reference_timing",
           "kernelwright.runtime", "torch.profiler", "torch.utils.flop_counter", "torch.autograd.profiler_legacy",
           "torch.utils._python_dispatch")
PRELOAD_OPTIONAL = ("torch._dynamo",)  # torch._inductor.compile_fx initialised CUDA on the H200 (torch 2.11)
OPTIONAL_ENV = "KERNELWRIGHT_FORKSERVER_OPTIONAL"  # "0": no optional imports (set by the judge after one touched CUDA)
MAX_MESSAGE = 1 << 20  # a spawn request (its environment included) larger than this is refused


def _cuda_touched() -> bool:
    """Whether this process has initialised the CUDA driver (a fork after that is unsafe): the
    driver holds its device files open from then on. Its library merely being loaded (torch's
    CUDA build links it) is harmless."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
                return True
        except OSError:
            continue
    import torch

    return bool(torch.cuda.is_initialized())


def preload(optional: bool) -> None:
    """Import PRELOAD, then (when asked) PRELOAD_OPTIONAL; refuse to serve when an import
    initialised the CUDA driver (ForkRefused names it)."""
    for name in PRELOAD:
        importlib.import_module(name)
    if _cuda_touched():
        raise ForkRefused("", "importing the judge's child code initialised the CUDA driver; children cannot be forked")
    from kernelwright.judge import build

    # The compilers' --version, the CPU's identity and the GPU's arch (subprocesses, no CUDA here),
    # memoised once for every child: each child's setup loads the judge's own kernels (the lead
    # spin, the input digest) through the build cache, whose key needs them; without this a child
    # on the CPU runs `g++ --version` for the digest (9.4 ms against 0.9 ms on 2 CPU cores).
    build.warm_host_facts("cuda" if build.find_compiler("cuda") else "cpu")
    if _cuda_touched():
        raise ForkRefused("", "finding the GPU's arch initialised the CUDA driver; children cannot be forked")
    _judge_kernels(build)
    for name in PRELOAD_OPTIONAL if optional else ():
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional import only costs the children time
            continue
        if _cuda_touched():
            raise ForkRefused(name, f"importing {name} initialised the CUDA driver; children cannot be forked")


def _judge_kernels(build: Any) -> None:
    """Build the judge's own kernels (the input digest, the lead spin) into the shared cache now:
    a child inside the sandbox cannot write the cache and would build them into its own folder,
    every time. The CUDA ones only where a GPU's device files are."""
    from kernelwright.judge import digest, lead

    specs = [build.spec_from_text(digest.CPU_SOURCE, lang="cpp", name="kw_digest")]
    if os.path.exists("/dev/nvidiactl") and build.find_compiler("cuda"):
        specs += [build.spec_from_text(digest.CUDA_SOURCE, lang="cuda", name="kw_digest"), build.spec_from_text(lead.SOURCE, name="kw_lead")]
    from kernelwright.judge.cache_prune import note_judge_kernels

    note_judge_kernels([r.key for r in build.build_many(specs) if r.ok])  # only sandboxed children load them later: a prune keeps them


class ForkRefused(RuntimeError):
    """The server cannot fork: an import initialised CUDA (`module` is the optional one that did, or '')."""

    def __init__(self, module: str, message: str) -> None:
        super().__init__(message)
        self.module = module


# A forked child's steps before the judge's child code runs, each timed from just before the fork
# (the monotonic clock is the machine's, so the parent's reading holds in the child) and reported in
# its setup reply's child_seconds as fork_<step> (judge.child.FORK_STEPS, judge.flow_children._seconds).
FORK_STEP_NAMES = ("forked", "session", "descriptors", "environment", "started")


def _child(request: dict[str, Any], fds: list[int], steps: dict[str, float], before_fork: float) -> int:
    """In the forked child: become a fresh judge child and run its main loop; the exit code.
    `steps` holds what was timed since `before_fork` (perf_counter in the server just before it forked)."""
    stdin_fd, log_fd, result_fd = fds
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(stdin_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(stdin_fd)
    os.close(log_fd)
    _close_pipes_and_sockets(keep=(0, 1, 2, result_fd))  # the server's sockets and wake-up pipe among them
    steps["descriptors"] = time.perf_counter() - before_fork
    os.set_inheritable(result_fd, True)  # as pass_fds made it for a spawned child
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True, errors="backslashreplace")
    interpreted = _interprets(os.environ)
    os.environ.clear()
    os.environ.update(request["env"])
    if _interprets(os.environ) != interpreted:
        forget_triton()
    os.chdir(request["cwd"])
    steps["environment"] = time.perf_counter() - before_fork
    from kernelwright.judge import child

    child.STARTED = time.perf_counter()
    child.FORK_STEPS.clear()
    child.FORK_STEPS.update(steps, started=child.STARTED - before_fork)
    return child.main(["kernelwright.judge.child", request["role"], str(result_fd)])


def _interprets(env: Any) -> bool:
    """Whether Triton, imported under `env`, runs its kernels in its interpreter: TRITON_INTERPRET
    holding one of the words Triton reads as true, in any case, unstripped (as its getenv_bool)."""
    return env.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "y", "yes")


def forget_triton() -> None:
    """Let the next `import triton` happen afresh. Triton chooses compiled or interpreted kernels for
    each @triton.jit function as it is defined, and its standard library (tl.zeros, tl.sum,
    tl.sigmoid, ...) was defined when the server imported it (torch.utils.flop_counter imports
    Triton): a CPU child, which interprets, would otherwise call compiled library functions from its
    interpreted kernels ("Cannot call @triton.jit'd outside of the scope of a kernel"). Triton's
    native module stays: it cannot be imported twice in one process."""
    for name in [n for n in sys.modules if (n == "triton" or n.startswith("triton.")) and not n.startswith("triton._C")]:
        del sys.modules[name]


def _close_pipes_and_sockets(keep: tuple[int, ...]) -> None:
    """Close every pipe and socket the child inherited but those it keeps (another child's
    descriptors, had one leaked into the server, never reach this one); files the imported
    libraries hold stay open."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("pipe:", "socket:")):
            try:
                os.close(fd)
            except OSError:
                pass


def _fork(request: dict[str, Any], fds: list[int]) -> int:
    """Fork one child; return its pid once it leads a session of its own (so that killing its
    process group, as the judge does, cannot miss it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    settled_r, settled_w = os.pipe()
    before_fork = time.perf_counter()
    try:
        pid = os.fork()
    except OSError:
        os.close(settled_r)
        os.close(settled_w)
        raise
    if pid == 0:
        code = 1
        try:
            steps = {"forked": time.perf_counter() - before_fork}
            os.close(settled_r)
            os.setsid()
            os.close(settled_w)
            steps["session"] = time.perf_counter() - before_fork
            code = _child(request, fds, steps, before_fork)
        except BaseException:  # noqa: BLE001 - a child that failed to become one says why in its log
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(settled_w)
    try:
        os.read(settled_r, 1)  # end of file once the child has its session (or died trying)
    finally:
        os.close(settled_r)
    return pid


def _send(sock: socket.socket, obj: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(obj).encode())
    except OSError:
        pass  # that judge is gone; the loop drops it on its next read


SWEEP_EVERY_S = 0.25  # how often the loop looks for orphans handed to it while children run
SWEEP_S = 0.2  # at most this long one sweep goes on killing and reaping (each round finds the next generation)


class _Server:
    """The loop: spawn requests from one judge (a socket pair) or from any judge of this user that
    connects (a listening socket), exits reported to the judge that asked for the child."""

    def __init__(self, conns: list[socket.socket], listener: socket.socket | None = None, hello: dict[str, Any] | None = None) -> None:
        self.conns, self.listener, self.hello = conns, listener, hello or {}
        self.owner: dict[int, socket.socket] = {}  # child pid -> the judge that asked for it
        self.wake = os.pipe()
        self.parent = os.getppid()
        # What a child leaves running comes to this process when the child ends (a subreaper), and
        # is killed before the judge hears of the exit: a daemon in a session of its own included,
        # where no uid of its own lets the judge kill it (a judge that is not root, or --sandbox off).
        from kernelwright.judge import confine

        self.subreaper = confine.child_subreaper()
        self.own = set(confine.children_of(os.getpid())) if self.subreaper else set()  # started before the loop: never swept
        self.next_sweep = 0.0

    def run(self) -> None:
        from kernelwright.judge.sandbox_check import confined_peer, refused_peer_line

        os.set_blocking(self.wake[1], False)
        os.set_blocking(self.wake[0], False)
        signal.set_wakeup_fd(self.wake[1], warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up descriptor hears of exits
        while True:
            watched = [*self.conns, self.wake[0], *([self.listener] if self.listener else [])]
            sweeping = self.subreaper and bool(self.owner)  # orphans come only from children (a handed one sends no SIGCHLD)
            wait_s = min(1.0, max(0.0, self.next_sweep - time.monotonic())) if sweeping else 1.0
            ready, _, _ = select.select(watched, [], [], wait_s)
            if self.wake[0] in ready:
                try:
                    while os.read(self.wake[0], 4096):
                        pass
                except BlockingIOError:
                    pass
            if sweeping and time.monotonic() >= self.next_sweep:
                self._sweep()  # also while the child runs: a daemon it started is an orphan at once
            self._reap()
            if self.listener is not None and self.listener in ready:
                conn, _ = self.listener.accept()
                why = confined_peer(conn)
                if why:  # a candidate of a judge that is not root has its uid: 0600 does not keep it out
                    line = refused_peer_line(why)
                    if line:
                        print(f"fork server: {line}", file=sys.stderr, flush=True)
                    _send(conn, {"ready": False, "error": f"this fork server serves no sandboxed process ({why})"})
                    conn.close()
                else:
                    self.conns.append(conn)
                    _send(conn, self.hello)
            for conn in [c for c in self.conns if c in ready]:
                if not self._request(conn):
                    self.conns.remove(conn)
                    conn.close()
                    for pid in [p for p, c in self.owner.items() if c is conn]:  # a judge gone: its children too
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except OSError:
                            pass
            if self.listener is None and not self.conns:
                return  # the one judge closed its end
            if self.listener is not None and os.getppid() != self.parent:
                return  # whoever started a shared server is gone

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.own.discard(pid)
            owner = self.owner.pop(pid, None)
            if owner is not None and self.subreaper:
                self._sweep()  # its orphans came here as it died: gone before its judge hears of the exit
            if owner is not None and owner in self.conns:
                _send(owner, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    def _sweep(self) -> None:
        """SIGKILL every child of this process that it did not fork itself (orphans handed to it,
        zombies too: a process whose main thread exited reads as one while its other threads run)
        and reap them, round after round while new ones come (an orphan's own children are handed
        here when it dies), for at most SWEEP_S. A child of this process cannot be reaped by anyone
        else, so its pid is still its own when it is signalled. A chain of processes that each fork
        and exit at once can outrun it (docs/judge.md, Not yet)."""
        from kernelwright.judge import confine

        now = time.monotonic()
        self.next_sweep, deadline = now + SWEEP_EVERY_S, now + SWEEP_S
        while confine.kill_adopted(lambda pid: pid in self.owner or pid in self.own) and time.monotonic() < deadline:
            time.sleep(0.002)

    def _request(self, conn: socket.socket) -> bool:
        """Serve one message; False when that judge closed its end."""
        try:
            data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
        except OSError:
            return False
        if not data:
            return False
        request: dict[str, Any] = {}
        try:
            request = json.loads(data)
            if len(fds) != 3:
                raise ValueError(f"a spawn request carries 3 descriptors, got {len(fds)}")
            pid = _fork(request, fds)
            self.owner[pid] = conn
            _send(conn, {"id": request["id"], "pid": pid})
        except Exception as exc:  # noqa: BLE001 - a bad request is answered, the server goes on
            _send(conn, {"id": request.get("id") if isinstance(request, dict) else None, "error": f"{type(exc).__name__}: {exc}"[:500]})
        finally:
            for fd in fds:
                os.close(fd)  # the child has its copies; no other child may inherit these
        return True


def _ready(began: float) -> dict[str, Any]:
    from kernelwright.judge.forkpool import import_env_key

    return {"ready": True, "pid": os.getpid(), "preload_s": round(time.perf_counter() - began, 3), "key": repr(import_env_key())}


def _listener(path: str) -> socket.socket:
    """A unix socket at `path` that only this user can reach (core.sockets: its folder private)."""
    from kernelwright.core.sockets import bind_private, clear_stale, private_folder

    private_folder(path)
    clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    bind_private(sock, path)
    sock.listen(64)
    return sock


def main(argv: list[str]) -> int:
    """`forkserver FD` serves the judge at the other end of socket FD; `forkserver --listen PATH`
    serves every judge of this user that connects to PATH (KERNELWRIGHT_FORKSERVER_SOCKET), until
    the process that started it is gone."""
    from kernelwright.judge.sandbox import clean_env

    if clean_env(os.environ) != dict(os.environ):  # a server started by hand: its children inherit its memory, never a key
        os.execve(sys.executable, [sys.executable, "-m", "kernelwright.judge.forkserver", *argv[1:]], clean_env(os.environ))
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]  # as a child does (judge.child)
    shared = argv[1] == "--listen"
    sock = None if shared else socket.socket(fileno=int(argv[1]))
    began = time.perf_counter()
    try:
        preload(os.environ.get(OPTIONAL_ENV, "1") != "0")
    except ForkRefused as exc:
        if sock is not None:
            _send(sock, {"ready": False, "error": str(exc), "cuda_touched": exc.module})
        print(f"fork server: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the judge falls back to spawning children
        if sock is not None:
            _send(sock, {"ready": False, "error": f"{type(exc).__name__}: {exc}"[:1000]})
        print(f"fork server: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if shared:
        _Server([], _listener(argv[2]), _ready(began)).run()
        _exit_now()
    assert sock is not None
    _send(sock, _ready(began))
    _Server([sock]).run()
    _exit_now()
    return 0


def _exit_now() -> None:
    """Exit without finalising the interpreter: the judge waits for this exit (forkpool.shutdown),
    and tearing down torch's modules took 0.6 s on the 2-core box; the server holds nothing to flush but stdio."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
