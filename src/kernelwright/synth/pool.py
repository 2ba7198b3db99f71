"""Synthesis worker processes: task code runs in them, never in the parent.

Each worker imports torch once and examines candidates one at a time (filters.examine). The parent
keeps a few jobs queued per worker; a job that runs past its timeout, or a worker that dies, costs
that one candidate (stage "timeout" or "crash") and the worker is replaced. On a GPU, timing runs in
a pool of its own with one worker, after the checking pool has finished (pipeline).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Iterator


def _worker_main(conn: Connection, context: dict[str, Any], spec_text: str, parent: str) -> None:
    import os

    from kernelwright.judge import sandbox

    # the task code it runs is generated: confined first, as a candidate child is (one thread yet)
    os.environ[sandbox.SPEC_ENV] = spec_text
    sandbox.enter_from_env(parent)
    # each worker compiles on its own: a pool of inductor compile processes per worker would crowd the cores
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch

    from kernelwright.synth.filters import examine

    torch.set_num_threads(int(os.environ.get("KERNELWRIGHT_SYNTH_THREADS", "1")))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(examine(job, context))


def _context() -> Any:
    """Workers forked from multiprocessing's fork server, which imports torch once for the whole
    process (a spawned worker paid Python's and torch's start-up, seconds on a 2-core box, every
    time a pool started or a worker was replaced); torch's compiler is imported in each worker,
    after its settings. Where fork servers are unavailable, spawned workers. Either starts with
    the sandbox's allow-listed environment (judge.sandbox): workers inherit its memory."""
    try:
        ctx = mp.get_context("forkserver")
    except ValueError:
        return mp.get_context("spawn")
    ctx.set_forkserver_preload(["torch", "numpy", "kernelwright.synth.filters"])
    with _allow_listed_environment():
        from multiprocessing import forkserver

        forkserver.ensure_running()
    return ctx


@contextlib.contextmanager
def _allow_listed_environment() -> Iterator[None]:
    """The process's environment cut to the sandbox's allow-list for the block (what a process
    started in it inherits), then put back."""
    from kernelwright.judge import sandbox

    saved = dict(os.environ)
    kept = sandbox.clean_env(saved)
    for name in set(saved) - set(kept):
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


@dataclass
class _Worker:
    process: Any
    conn: Connection
    job: dict[str, Any] | None = None
    started: float = 0.0
    queue: list[dict[str, Any]] = field(default_factory=list)


class Pool:
    """n worker processes; `run(jobs)` yields results as they finish (any order)."""

    def __init__(self, n: int, context: dict[str, Any], *, timeout_s: float, sandbox_mode: str = "auto") -> None:
        if n < 1:
            raise ValueError(f"workers must be at least 1, got {n}")
        from kernelwright.judge import sandbox
        from kernelwright.judge.build import cache_dir

        self._mp = _context()
        self._context = context
        self.timeout_s = timeout_s
        refused = sandbox.refusal(sandbox_mode)
        if refused:
            raise RuntimeError(refused)
        self._folder = tempfile.mkdtemp(prefix="kw-synth-")  # each worker's own folder is made inside (judge.sandbox.enter)
        self._spec = sandbox.for_candidate(sandbox_mode, str(cache_dir()), device=context.get("device")).to_env()
        self._workers = [self._spawn() for _ in range(n)]

    def _spawn(self) -> _Worker:
        parent, child = self._mp.Pipe()
        process = self._mp.Process(target=_worker_main, args=(child, self._context, self._spec, self._folder), daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def run(self, jobs: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Results of the jobs; stop pulling from `jobs` by closing the generator."""
        pending = iter(jobs)
        exhausted = False
        while True:
            for w in self._workers:
                if w.job is None and not exhausted:
                    job = next(pending, None)
                    if job is None:
                        exhausted = True
                        continue
                    w.job, w.started = job, time.monotonic()
                    w.conn.send(job)
            busy = [w for w in self._workers if w.job is not None]
            if not busy:
                return
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=1.0)
            for i, w in enumerate(self._workers):
                if w.job is None:
                    continue
                if w.conn in ready and w.conn.poll():
                    try:
                        result = w.conn.recv()
                    except EOFError:
                        result = self._lost(i, "crash", "the worker died")
                    else:
                        w.job = None
                    yield result
                elif w.process.sentinel in ready or not w.process.is_alive():
                    yield self._lost(i, "crash", f"the worker died (exit code {w.process.exitcode})")
                elif time.monotonic() - w.started > self.timeout_s:
                    yield self._lost(i, "timeout", f"no answer within {self.timeout_s:g} s")

    def _lost(self, i: int, stage: str, reason: str) -> dict[str, Any]:
        w = self._workers[i]
        job = w.job or {}
        w.process.kill()
        w.process.join(5)
        _reap(w.process.pid)
        self._workers[i] = self._spawn()
        return {"index": job.get("index"), "phase": job.get("phase", "all"), "status": "rejected", "stage": stage, "reason": reason,
                "task": job.get("task"), "retry": bool(job.get("retry")), "seconds": {}}

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for w in self._workers:
            w.process.join(5)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(5)
            _reap(w.process.pid)
        shutil.rmtree(self._folder, ignore_errors=True)


def _reap(pid: int | None) -> None:
    """What a worker left running (a daemon of the task code's) goes with it (judge.sandbox.reap)."""
    from kernelwright.judge import sandbox

    if pid:
        sandbox.reap(pid)
