"""The one place that launches judge children: spawn, command, hard timeouts, kill.

A child is `python -m kernelwright.judge.child ROLE FD` in its own process group, pinned to one GPU
through CUDA_VISIBLE_DEVICES, its stdout and stderr going to a log file. It is forked from the fork
server (judge.forkpool) when one runs, and spawned afresh otherwise; either way it is a new process,
used once. Commands go in on stdin as
JSON lines; results come back on an authenticated pipe (judge.channel).

Roles: `reference` (the judge's side), `candidate` (confined), and `hosted`: confined as a candidate
child is, serving the commands of a module its caller names (ChildConfig.commands), so that a layer
above the judge (synthesis's workers, synth.worker) runs generated code through this launcher
without the judge importing it. A hosted child answers commands until it is closed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kernelwright.judge import confine, forkpool, replies, sandbox, uids
from kernelwright.judge.channel import ChannelClosed, ChannelForged, ChannelTimeout, Reader, close_fds, new_key
from kernelwright.judge.child import COMMANDS_ENV
from kernelwright.judge.forkpool import Forked, ForkServerError, absolute_pythonpath
from kernelwright.core.records import truncate

log = logging.getLogger(__name__)
memory_log = logging.getLogger(__name__ + ".memory")  # each CUDA command's memory, at debug (child.note_memory)

ROLES = ("reference", "candidate", "hosted")
CONFINED = ("candidate", "hosted")  # roles that run generated code: in the sandbox, watched, their uid's processes reaped
KILL_WAIT_S = 2.0  # at most this long a killed child's process group is waited for, until nothing in it runs


class ChildError(RuntimeError):
    """A child failed to answer a command; `kind` says how."""

    def __init__(self, kind: str, message: str, log_tail: str = "", role: str = "") -> None:
        super().__init__(message)
        self.kind = kind  # "timeout", "died", "forged", or an error kind the child reported
        self.log_tail = log_tail  # the end of the child's stdout/stderr
        self.role = role  # "reference", "candidate" or "hosted"


@dataclass(frozen=True, kw_only=True)
class ChildConfig:
    """How to start a child."""

    role: str  # "reference", "candidate" or "hosted"
    device: str  # "cuda" or "cpu"
    gpu_index: int  # GPU the child is pinned to
    workdir: Path  # private folder for this evaluation
    env: dict[str, str]  # extra environment variables
    sandbox_read: tuple[str, ...] = ()  # what a candidate child spawned afresh may read (its problem, its candidate's folder)
    commands: str = ""  # a hosted child's command table: a kernelwright module with handlers() (judge.child.main)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        if (self.role == "hosted") != bool(self.commands) or (self.commands and not self.commands.startswith("kernelwright.")):
            raise ValueError(f"a hosted child needs commands naming a kernelwright module, and no other role takes one; got role "
                             f"{self.role!r}, commands {self.commands!r}")


def physical_gpu(index: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry for GPU `index` as this process counts GPUs: when the judge
    itself runs with CUDA_VISIBLE_DEVICES set (a Ray worker, a shared machine), index 0 is the
    first GPU it was given, not the machine's first."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        return str(index)
    if not 0 <= index < len(visible):
        raise ValueError(f"GPU index {index} is not among the {len(visible)} GPU(s) in CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}")
    return visible[index]


def child_env(config: ChildConfig) -> dict[str, str]:
    """The whole environment of a child: the allow-listed part of the judge's (judge.sandbox: no
    key, token or secret, no store, none of the judge's own doors), the config's extras, and the pinning."""
    env = absolute_pythonpath(sandbox.clean_env(os.environ))
    env.update(config.env)
    env["PYTHONUNBUFFERED"] = "1"
    if config.commands:
        env[COMMANDS_ENV] = config.commands
    env.setdefault("KINETO_LOG_LEVEL", "99")  # the profiler (op audit, profile step) prints two lines per use otherwise
    if config.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = physical_gpu(config.gpu_index)
        env.pop("TRITON_INTERPRET", None)  # a GPU verdict times compiled Triton kernels, never the interpreter
    else:
        env["TRITON_INTERPRET"] = "1"  # Triton kernels on the CPU backend: its interpreter (no GPU to compile for)
    return env


def describe_exit(returncode: int | None) -> str:
    """Human words for a child's exit status."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"


class Quiet:
    """Child.paused's answer: whether the candidate's processes stayed still, final once the block ended."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __bool__(self) -> bool:
        return self.value


class Child:
    """One running judge child."""

    _own_uid = False  # set from its sandbox spec when it starts (a stand-in built without starting has none)
    _signaller: uids.Signaller | None = None  # a candidate's kept helper for its uid (a root judge's)
    _killed = False  # kill() has run (a stand-in built without starting has not)

    def __init__(self, config: ChildConfig) -> None:
        self.config = config
        self.env = self.env_for(config)  # the whole environment it starts with (judge.spares keys on it)
        self.log_path = config.workdir / f"{config.role}.log"
        # the judge reads the log through this descriptor only: the child may replace the file at
        # that path (its folder is its own inside the sandbox) with a link to a file it cannot read
        self._log_fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._key = new_key()
        # the result channel: a unix stream socket, so descriptors can travel on it (judge.handover)
        try:  # a child that did not start leaves no descriptor open (a synthesis run goes on after one)
            spec = sandbox.candidate_spec(self.env) if config.role in CONFINED else None  # the reference is the judge's side
            lim = sandbox.watched(spec)  # ValueError for a bad setting, before anything starts
            self._own_uid = spec is not None and "uid" in spec.layers  # it becomes UID_BASE + its pid (judge.sandbox.enter)
            self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._proc = self._spawn(theirs.fileno())
            finally:
                theirs.close()
        except BaseException:
            os.close(self._log_fd)
            if hasattr(self, "_sock"):
                self._sock.close()
            raise
        self._reader = Reader(self._sock.fileno(), self._key, sock=self._sock, alive=lambda: self._proc.poll() is None)
        # a candidate's disk (its folder, its extension folder) and host memory, watched while it lives (judge.quota)
        # a candidate's uid is stopped, continued and killed by a helper kept for it (judge.uids), started here beside it
        self._signaller = uids.Signaller(sandbox.UID_BASE + self._proc.pid) if (
            self._own_uid and config.role == "candidate" and os.getuid() == 0) else None
        self._watch = sandbox.watch_for(spec, self._proc.pid, [config.workdir, *(spec.write if spec else ())], lim, self._signaller)
        self._exit_sent = False
        self._closed = False
        self._killed = False
        self.outstanding = 0  # commands sent whose replies were not collected
        self.jit: dict[str, Any] | None = None  # a candidate child's latest report of Triton's just-in-time work
        self._received: list[int] = []  # descriptors of the last reply, until taken (received_fds)
        self._send_line(self._key.hex())

    @staticmethod
    def env_for(config: ChildConfig) -> dict[str, str]:
        return child_env(config)

    def _why(self) -> str:
        """What the sandbox's watch killed it for ('' when it did not), for the error's message."""
        return f": {self._watch.over}" if self._watch is not None and self._watch.over else ""

    def _spawn(self, write_fd: int) -> subprocess.Popen | Forked:
        env = self.env
        for _ in range(2):  # a server refused for an optional import is replaced once
            srv = forkpool.server()
            if srv is None:
                break
            try:
                return srv.spawn(role=self.config.role, env=env, cwd=self.config.workdir, log_fd=self._log_fd, result_fd=write_fd)
            except (ForkServerError, OSError) as exc:
                forkpool.mark_failed(srv, str(exc))
        # -P: the working folder is not put on sys.path (a module planted there never shadows the judge's)
        cmd = [sys.executable, "-P", "-m", "kernelwright.judge.child", self.config.role, str(write_fd)]
        if self.config.sandbox_read:  # it enters the sandbox before torch's import (judge.child.main)
            env = {**env, sandbox.READ_ENV: os.pathsep.join(self.config.sandbox_read)}
        return subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=self._log_fd, stderr=subprocess.STDOUT,
            pass_fds=(write_fd,), start_new_session=True, env=env, cwd=str(self.config.workdir),
        )

    def _answer(self, text: str) -> None:
        """One line to the child on the result socket (a timed call's seed, judge.window.ask_seed):
        not on its stdin, a pipe, which code in the child could open again for writing through
        /proc/self/fd/0 and so put back a line it had read first."""
        try:
            self._sock.sendall(text.encode() + b"\n")
        except OSError:
            pass  # the child is gone; the next read says how

    def _send_line(self, text: str) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(text.encode() + b"\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the child is gone; the next read says how

    def call(self, command: str, args: dict[str, Any] | None = None, *, timeout_s: float, fds: list[int] | None = None,
             answers: list[int] | None = None, found: list[str] | None = None) -> Any:
        """Send one command and wait for its result; raise ChildError on failure. With `answers`,
        the child asks for them one at a time while it works ({"ask": n, "found": [...]}, n counting
        the asks from 0), each answered with one line on its stdin when asked for and not before (a
        timed batch's seeds, judge.inputs.asking_getter); what each ask says it found
        (judge.window.quiet_window) is added to `found`. A reply before every answer was taken, an
        ask out of turn, or an ask of a command given none is forged."""
        self.send(command, args, fds)
        return self.wait(command, timeout_s=timeout_s, answers=answers, found=found)

    def send(self, command: str, args: dict[str, Any] | None = None, fds: list[int] | None = None) -> None:
        """Send one command without waiting: the child works on it while the judge does other
        things; `wait` collects the result (one outstanding command at a time). Descriptors in fds
        go ahead of it on the result socket (the caller still owns and closes its copies)."""
        if fds:
            try:
                socket.send_fds(self._sock, [b"F"], fds)
            except OSError:
                self.kill()  # never a command naming descriptors that did not go; the next read says the child died
                self.outstanding += 1
                return
        self._send_line(json.dumps({"cmd": command, "args": args or {}, **({"fds": len(fds)} if fds else {})}))
        self.outstanding += 1

    def wait(self, command: str, *, timeout_s: float, answers: list[int] | None = None, found: list[str] | None = None) -> Any:
        """The result of the command sent last; raise ChildError on failure. Descriptors that came
        with it wait for received_fds(); ones never taken are closed at the next wait. `answers`: call()."""
        self.outstanding = max(0, self.outstanding - 1)
        self._drop_received()
        deadline = time.monotonic() + timeout_s
        given = 0
        try:
            while True:
                reply, fds = self._reply(max(0.0, deadline - time.monotonic()))
                if "ask" not in reply or "ok" in reply:
                    break
                close_fds(fds)
                if answers is None or type(reply["ask"]) is not int or reply["ask"] != given or given >= len(answers):
                    raise ChannelForged(f"an ask {str(reply['ask'])[:40]!r} out of turn ({given} of {0 if answers is None else len(answers)} answered)")
                said = reply.get("found", [])
                if not isinstance(said, list) or not all(isinstance(x, str) for x in said):
                    raise ChannelForged("an ask whose findings are not a list of strings")
                if found is not None:
                    found.extend(x[:200] for x in said[:50])
                self._answer(str(int(answers[given])))
                given += 1
            if answers is not None and given != len(answers) and reply.get("ok"):
                close_fds(fds)
                raise ChannelForged(f"a reply to '{command}' after {given} of its {len(answers)} asks")
        except ChannelTimeout:
            self.kill()
            raise ChildError("timeout", f"{self.config.role} child: '{command}' exceeded {timeout_s:g} s and was killed{self._why()}", self.log_tail(), self.config.role) from None
        except ChannelClosed:
            code = self._wait_exit()
            # the machine's memory floor is no fault of this candidate's own use: the judge's (infra)
            kind = "infra" if self._watch is not None and self._watch.machine else "died"
            raise ChildError(kind, f"{self.config.role} child {describe_exit(code)} during '{command}'{self._why()}", self.log_tail(), self.config.role) from None
        except ChannelForged as exc:
            self.kill()
            raise ChildError("forged", f"{self.config.role} child: {exc}", self.log_tail(), self.config.role) from None
        if not reply.get("ok"):
            close_fds(fds)
            err = reply.get("error")
            err = err if isinstance(err, dict) else {}
            kind = str(err.get("kind", "error"))
            if kind == "infra" and self.config.role == "candidate":  # candidate code can say anything: only the judge's own evidence is infra
                kind = "error"
            raise ChildError(kind, str(err.get("message", "unknown error")), self.log_tail(), self.config.role)
        result = reply.get("result")
        if self.config.role == "candidate":  # every candidate command answers a mapping, its fields in their forms
            field = replies.malformed(result) if isinstance(result, dict) else ""
            bad = "it is not a mapping" if not isinstance(result, dict) else (f"its field {field!r} is malformed" if field else "")
            if bad:
                close_fds(fds)
                self.kill()
                raise ChildError("forged", f"candidate child: the reply to '{command}' is forged: {bad}", self.log_tail(), self.config.role)
        if self.config.role == "candidate" and isinstance(result, dict) and "jit" in result:
            self.jit = result.pop("jit")  # Triton's just-in-time work so far, the child's own report (judge.jit_clock)
        self._received = fds
        mem = result.pop("memory_mib", None) if isinstance(result, dict) else None
        if mem is not None and memory_log.isEnabledFor(logging.DEBUG):
            memory_log.debug("%s child %s after %r: memory_mib [reserved, peak since its last reply, staging, allocated, allocated peak, inactive split] %s",
                             self.config.role, self._proc.pid, command, json.dumps(mem)[:200])
        return result

    def _reply(self, timeout_s: float) -> tuple[dict[str, Any], list[int]]:
        """One authenticated reply and the descriptors it claims. A candidate's code shares its
        child's process and may forge any message, so the form is checked here: an object, and
        exactly the descriptors it claims (none left over)."""
        reply = self._reader.recv(timeout_s)
        if not isinstance(reply, dict):
            self._reader.close_fds()
            raise ChannelForged(f"a reply that is not an object ({type(reply).__name__})")
        n_fds = reply.get("fds", 0)
        fds = self._reader.take_fds(n_fds if type(n_fds) is int else -1)
        if self._reader.unclaimed():
            close_fds(fds)
            self._reader.close_fds()
            raise ChannelForged("descriptors arrived that no reply claims")
        return reply, fds

    def received_fds(self) -> list[int]:
        """The descriptors of the last reply (judge.handover); the caller owns and closes them."""
        fds, self._received = self._received, []
        return fds

    def _drop_received(self) -> None:
        close_fds(self._received)
        self._received = []

    @contextlib.contextmanager
    def paused(self, on: bool = True, *, whole_uid: bool = False) -> Iterator[Quiet]:
        """The child's whole process group stopped (SIGSTOP) for the block, then continued: none of
        its threads runs while the reference child copies an output out of its memory (CUDA IPC).
        Not stopped: GPU work it queued before, and a process it started outside its group (the
        sandbox's business). With whole_uid, a candidate's every process of its own uid as well
        (a root judge's uid layer; uids.stop_child): those it moved to a group or session of their
        own, which could load the host while the reference measures its launch times. Yields a
        Quiet, false when a process of that uid still ran after the stop, or ran again during the
        block (a timer's SIGCONT it arranged, uids.ran_since): read it after the block."""
        if not on:
            yield Quiet(True)
            return
        self._signal_group(signal.SIGSTOP)
        by_uid = whole_uid and self._own_uid and self.config.role == "candidate" and self._proc.returncode is None
        quiet, before = Quiet(True), None
        uid = sandbox.UID_BASE + self._proc.pid
        try:  # the stop inside: whatever it stopped before an error is continued
            if by_uid:
                quiet.value = uids.stop_child(self._proc.pid, self._signaller) is not False
                before = uids.cpu_times(uid) if quiet.value and os.getuid() == 0 else None
            yield quiet
        finally:
            if before is not None and uids.ran_since(uid, before):
                quiet.value = False
            if by_uid:
                uids.continue_child(self._proc.pid, self._signaller)
            self._signal_group(signal.SIGCONT)

    def _signal_group(self, sig: int) -> None:
        if self._proc.returncode is not None:
            return  # reaped: its pid (and group) may be another process's by now
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None

    def fileno(self) -> int:
        """The result channel's descriptor, readable when a reply (or part of one) waits: for
        select() over several children's outstanding commands (synth.pool)."""
        return self._sock.fileno()

    def pending(self) -> bool:
        """Whether bytes wait on the result channel that no command asked for."""
        return self._reader.pending()

    def drain(self, timeout_s: float) -> bool:
        """Collect (and drop) the replies of commands still outstanding; whether the child is
        alive and idle afterwards."""
        try:
            while self.outstanding:
                self.wait("an outstanding command", timeout_s=timeout_s)
        except ChildError:
            return False
        return self.alive()

    def _wait_exit(self) -> int | None:
        try:
            return self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return self._proc.returncode

    def empty_log(self) -> None:
        """Drop what the log holds (a spare's, before its candidate: judge.spares)."""
        os.ftruncate(self._log_fd, 0)

    def log_tail(self, limit: int = 3000) -> str:
        """The end of the child's output (read from the end: the log may be huge)."""
        try:
            size = os.fstat(self._log_fd).st_size
            start = max(0, size - 4 * limit)
            text = os.pread(self._log_fd, size - start, start).decode(errors="replace")
        except OSError:
            return ""
        return truncate(text, limit)

    def kill(self) -> None:
        """Kill the child's whole process group and every process its sandbox's uid has (a daemon it
        started in a session of its own), then reap it. A second call kills its group again, not its
        uid: nothing runs as that uid any more, and its pid (the uid's number) may be another child's by then."""
        first, self._killed = not self._killed, True
        if self._watch is not None:
            self._watch.stop()  # before the reap: its pid may be another process's after
        left = True
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)  # also whatever the child left running
        except (ProcessLookupError, PermissionError):
            left = False
        if self._own_uid and first:  # before the wait, while its pid, and so its uid, may still be its own; without a uid of its own,
            sandbox.reap(self._proc.pid, self._signaller)  # its group went above and the fork server sweeps orphans
        if self._signaller is not None:
            self._signaller.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("child %s did not exit after SIGKILL", self._proc.pid)
        if left:  # SIGKILL is delivered, not yet acted on: the verdict waits (a little) until they are gone
            deadline = time.monotonic() + KILL_WAIT_S
            while time.monotonic() < deadline:
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)  # again: one that rejoined the group (setpgid) meanwhile
                except ProcessLookupError:
                    break  # nobody left in the group (the usual case: no /proc scan)
                except PermissionError:
                    pass
                if not confine.live_in_group(self._proc.pid):
                    break  # zombies only, whose parent is gone: init reaps them
                time.sleep(0.01)

    def request_exit(self) -> None:
        """Ask the child to exit without waiting (close() waits); lets several children exit at once."""
        if self._proc.poll() is None and not self._exit_sent:
            self._send_line(json.dumps({"cmd": "exit", "args": {}}))
            self._exit_sent = True

    def close(self) -> None:
        """Ask the child to exit, then make sure it and its process group are gone. A second call
        does nothing: closing the pipe's descriptor number again could close whatever file took
        that number since."""
        if self._closed:
            return
        self._closed = True
        if self._proc.poll() is None:
            self.request_exit()
            deadline = time.monotonic() + 2
            while self._proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        self.kill()
        for stream in (self._proc.stdin,):
            if stream:
                try:
                    stream.close()
                except OSError:
                    pass
        self._drop_received()
        self._reader.close_fds()
        self._sock.close()
        os.close(self._log_fd)

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
