"""The pool's `local` backend: each worker a process of its own on this machine, running the same
`JudgeWorker` an actor runs under Ray, reached through a socket pair. On CUDA, worker i sees GPU i
alone (CUDA_VISIBLE_DEVICES), as a Ray actor with one GPU does. Workers start as
`python -m kernelwright.client.pool_local FD DEVICE`, so the caller's own script is never re-run
in them (as multiprocessing's spawn would)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import shutil
import tempfile
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from kernelwright.client.pool import START_S, JudgeWorker, WorkerLost

CLOSE_S = 10.0  # the longest close waits for idle workers to exit before killing what still runs
from kernelwright.judge.forkpool import absolute_pythonpath


def _serve(conn: Connection, device: str, root: str) -> None:
    """A worker process: answer requests until the connection closes."""
    worker = JudgeWorker(device, root)
    conn.send(("ready", worker.info()))
    try:
        while True:
            try:
                kind, payload = conn.recv()
            except EOFError:
                return
            if kind == "evaluate":
                conn.send(("job", worker.evaluate(payload)))
            elif kind == "info":
                conn.send(("info", worker.info()))
    finally:
        worker.close()


class _Slot:
    def __init__(self, device: str, gpu: str | None, root: str) -> None:
        mine, theirs = socket.socketpair()
        env = absolute_pythonpath(dict(os.environ))
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        try:
            # its own session: a Ctrl-C at the terminal reaches the driver, which closes the pool, not each worker;
            # its stdout unused (a command's --json output is the driver's stdout)
            self.proc = subprocess.Popen([sys.executable, "-m", "kernelwright.client.pool_local", str(theirs.fileno()), device, root],
                                         pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         start_new_session=True)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        try:
            self.info = self._expect("ready", START_S)
        except BaseException:
            self.proc.kill()
            _stop_all([self], 10.0)
            raise

    def _expect(self, kind: str, timeout: float | None) -> Any:
        """The worker's next message, of this kind; WorkerLost when it dies or falls silent first."""
        try:
            if not wait([self.conn], timeout):
                raise WorkerLost(f"process {self.proc.pid} said nothing in {timeout:.0f} s")
            got, payload = self.conn.recv()  # EOF: the process is gone (its end of the pair closed)
        except (EOFError, OSError, ValueError) as exc:  # ValueError, OSError: the pool closed the connection meanwhile
            self.proc.poll()
            raise WorkerLost(f"process {self.proc.pid} is gone (exit status {self.proc.returncode}, {type(exc).__name__})") from None
        if got != kind:
            raise WorkerLost(f"process {self.proc.pid} answered {got!r} where {kind!r} was due")
        return payload



def _stop_all(slots: list[_Slot], wait_s: float) -> None:
    """Close the slots' connections, wait for their processes up to wait_s in all, kill the rest."""
    for x in slots:
        try:
            x.conn.close()
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    for x in slots:
        try:
            x.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            x.proc.kill()
            try:
                x.proc.wait(10)
            except subprocess.TimeoutExpired:  # stuck in the kernel (a GPU fault): left to the OS, the others still stopped
                pass


class LocalWorkers:
    """N worker processes (new interpreters: no CUDA state is inherited)."""

    def __init__(self, n: int | None, device: str) -> None:
        from kernelwright.judge.evaluate import resolve_device

        self.device = resolve_device(device)
        if n is None:
            n = len(self._visible()) if self.device == "cuda" else 2
        if n < 1:
            raise ValueError("device cuda, but no GPU is visible to this process")
        self.size = n
        self._gpus: list[str | None] = self._gpu_ids(n) if self.device == "cuda" else [None] * n
        self._lock = threading.Lock()
        self._closed = False
        self._root = tempfile.mkdtemp(prefix="kw-pool-")  # the workers' job folders: removed at close, a killed worker's too
        self._slots: list[_Slot | None] = [None] * n
        try:
            for i in range(n):
                self._slots[i] = _Slot(self.device, self._gpus[i], self._root)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _visible() -> list[str]:
        """This process's GPUs as CUDA_VISIBLE_DEVICES names them (indices, UUIDs or MIG ids), else their indices."""
        import torch

        count = torch.cuda.device_count()
        listed = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
        return listed[:count] if listed else [str(i) for i in range(count)]

    def _gpu_ids(self, n: int) -> list[str | None]:
        visible = self._visible()
        if len(visible) < n:
            raise ValueError(f"{n} workers on cuda need {n} GPUs; {len(visible)} visible")
        return list(visible[:n])

    def call(self, i: int, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """The worker's job for the request; WorkerLost when it dies first or says nothing for `timeout` s."""
        slot = self._slots[i]
        if slot is None:
            raise WorkerLost(f"worker {i} is not running")
        try:
            slot.conn.send(("evaluate", request))
        except OSError as exc:
            raise WorkerLost(f"process {slot.proc.pid}: {type(exc).__name__}") from None
        return slot._expect("job", timeout)

    def replace(self, i: int) -> None:
        """Worker i again, in a new process (the old one killed if it still runs); WorkerLost once
        the pool is closed, the new process stopped if the pool closed while it started."""
        with self._lock:
            if self._closed:
                raise WorkerLost("the pool is closed")
            old, self._slots[i] = self._slots[i], None
        if old is not None:
            old.proc.kill()
            _stop_all([old], 10.0)
        new = _Slot(self.device, self._gpus[i], self._root)
        with self._lock:
            if not self._closed:
                self._slots[i] = new
                return
        new.proc.kill()
        _stop_all([new], 10.0)
        raise WorkerLost("the pool is closed")

    def kill(self, i: int) -> None:
        slot = self._slots[i]
        if slot is not None:
            slot.proc.kill()

    def info(self) -> list[dict[str, Any]]:
        return [s.info if s is not None else {} for s in self._slots]

    def close(self) -> None:
        """Every connection closed at once (an idle worker exits at the end of its input), then one
        shared wait of CLOSE_S; what still runs (a busy worker) is killed."""
        with self._lock:
            self._closed = True
            slots, self._slots = [x for x in self._slots if x is not None], [None] * len(self._slots)
        _stop_all(slots, CLOSE_S)
        shutil.rmtree(self._root, ignore_errors=True)

    def shutdown(self) -> None:
        """Nothing outlives close here."""


if __name__ == "__main__":
    os.set_inheritable(int(sys.argv[1]), False)  # the judge's own children do not get the driver's connection
    _serve(Connection(int(sys.argv[1])), sys.argv[2], sys.argv[3])
