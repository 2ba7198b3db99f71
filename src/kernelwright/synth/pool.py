"""Synthesis worker processes: task code runs in them, never in the parent.

Each worker is a judge child of the `hosted` role (judge.workers, the one launcher: forked from
the judge's fork server, which has imported torch, or spawned afresh), confined as a candidate
child is before any task code runs, and serving synth.worker's commands. It examines candidates
one at a time (filters.examine). A task's code runs in its worker's process and could change the
filters there for every later job (accept them all, say): where the code is not the rule composer's
(`fresh`: a model's programs, a set read back from a file), each worker examines one job and is
replaced. The parent keeps one job outstanding per worker. Jobs and results
are JSON on the child's authenticated channel, never pickles, and a result is held to its form
(`malformed`) before the parent reads it: task code shares its worker's process and can write
anything there. A job that runs past its timeout, a worker that dies, or a reply the parent
refuses costs that one candidate (stage "timeout" or "crash") and the worker is replaced. On a
GPU, timing runs in a pool of its own with one worker, after the checking pool has finished (pipeline).
"""

from __future__ import annotations

import math
import select
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kernelwright.judge.workers import Child, ChildConfig, ChildError
from kernelwright.synth.filters import STAGES

COMMANDS = "kernelwright.synth.worker"  # the worker's command table (judge.child imports it, inside the sandbox)
START_TIMEOUT_S = 600.0  # a worker's start and setup: spawned afresh on a loaded 2-core machine, torch's import took minutes
POLL_S = 1.0  # the longest the parent waits before it looks at every busy worker again
START_FAILURES = 3  # workers in a row that did not start mid-run before the run ends (each rejects its job before)


@dataclass
class _Worker:
    child: Child | None  # None: to be started before its next job (a fresh one per job, or one lost)
    job: dict[str, Any] | None = None  # the job it examines now
    started: float = 0.0  # when that job was sent (time.monotonic)


class Pool:
    """n worker processes; `run(jobs)` yields results as they finish (any order)."""

    def __init__(self, n: int, context: dict[str, Any], *, timeout_s: float, sandbox_mode: str = "auto", fresh: bool = True) -> None:
        if n < 1:
            raise ValueError(f"workers must be at least 1, got {n}")
        from kernelwright.judge import sandbox
        from kernelwright.judge.build import cache_dir

        refused = sandbox.refusal(sandbox_mode)
        if refused:
            raise RuntimeError(refused)
        self._context = context
        self.timeout_s = timeout_s
        self.fresh = fresh  # a new worker for every job
        self._device = "cuda" if context.get("device") == "cuda" else "cpu"
        self._folder = Path(tempfile.mkdtemp(prefix="kw-synth-"))  # each worker's own folder inside, its sandbox's inside that
        # traversable (not listable) by a worker's uid: access(2), which compilers ask of TMPDIR, counts no capability,
        # and a compiler that finds TMPDIR closed writes to /tmp, which the sandbox refuses (Triton's on the GPU did)
        self._folder.chmod(0o711)
        spec = sandbox.for_candidate(sandbox_mode, str(cache_dir()), device=context.get("device"))
        self._env = {sandbox.SPEC_ENV: spec.to_env(), "KERNELWRIGHT_CACHE": str(cache_dir())}
        self._workers: list[_Worker] = []
        self._start_failures, self._start_error = 0, ""
        starting: list[Child] = []
        try:
            starting = [self._start() for _ in range(n)]  # all asked to set up first: they start side by side
            for child in starting:
                self._workers.append(_Worker(self._ready(child)))
        except BaseException:
            for child in starting:
                child.close()
            shutil.rmtree(self._folder, ignore_errors=True)
            raise

    def _start(self) -> Child:
        """A worker, its setup (the run's context) sent and not yet answered."""
        workdir = Path(tempfile.mkdtemp(prefix="worker-", dir=self._folder))
        child = Child(ChildConfig(role="hosted", device=self._device, gpu_index=0, workdir=workdir, env=self._env, commands=COMMANDS))
        child.send("setup", {"context": self._context})
        return child

    def _ready(self, child: Child) -> Child:
        try:
            child.wait("setup", timeout_s=START_TIMEOUT_S)
        except ChildError as exc:
            child.close()
            raise RuntimeError(f"a synthesis worker did not start: {exc}\n{exc.log_tail}") from None
        return child

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
                    w.job = job
                    if w.child is None and not self._replace(w):
                        yield self._lost(self._workers.index(w), "error", f"no worker could start for it: {self._start_error}")
                        continue
                    assert w.child is not None
                    w.started = time.monotonic()  # after its worker's start: the job's time limit is its own
                    w.child.send("examine", {"job": job})
            busy = [w for w in self._workers if w.job is not None and w.child is not None]
            if not busy:
                if exhausted:
                    return
                continue  # every job handed out this pass was rejected: its worker did not start
            soonest = min(w.started for w in busy) + self.timeout_s - time.monotonic()
            ready, _, _ = select.select([w.child.fileno() for w in busy if w.child is not None], [], [], max(0.0, min(POLL_S, soonest)))
            for i, w in enumerate(self._workers):
                if w.job is None or w.child is None:
                    continue
                left = w.started + self.timeout_s - time.monotonic()
                if w.child.fileno() in ready or left <= 0 or not w.child.alive():
                    yield self._collect(i, max(0.0, left))

    def _replace(self, w: _Worker) -> bool:
        """A fresh worker for w (mid-run: each job's in fresh mode, or one lost); False when it did not
        start, which rejects that job alone at stage "error" (the machine's fault: the pipeline may hand
        it out once more, at once). START_FAILURES in a row end the run."""
        try:
            w.child = self._ready(self._start())
        except (RuntimeError, OSError, ChildError) as exc:
            self._start_failures += 1
            self._start_error = str(exc)[:400]
            if self._start_failures >= START_FAILURES:
                raise RuntimeError(f"{START_FAILURES} synthesis workers in a row did not start; the last: {exc}") from None
            return False
        self._start_failures = 0
        return True

    def _collect(self, i: int, left_s: float) -> dict[str, Any]:
        """Worker i's result, or its job's rejection (and a new worker) when none of the right form came."""
        w = self._workers[i]
        job = w.job or {}
        assert w.child is not None
        try:
            result = w.child.wait("examine", timeout_s=left_s)
        except ChildError as exc:
            if exc.kind == "timeout":
                return self._lost(i, "timeout", f"no answer within {self.timeout_s:g} s")
            if exc.kind == "forged":  # not JSON, not signed, or out of turn
                return self._lost(i, "crash", f"the worker's reply was refused: {str(exc)[:400]}")
            return self._lost(i, "crash", f"the worker failed: {str(exc)[:400]}")
        why = malformed(result, job)
        if why:
            return self._lost(i, "crash", f"the worker's reply was refused: {why}")
        if self.fresh:
            self._retire(i)  # the task's code could have changed how its worker examines the next job
        w.job = None
        return result

    def _retire(self, i: int) -> None:
        """Worker i killed with what it left running (its process group, and its uid's processes:
        judge.workers); a fresh one starts when the next job needs it, after this result is handed on."""
        w = self._workers[i]
        if w.child is not None:
            w.child.kill()
            w.child.close()
        self._workers[i] = _Worker(None)

    def _lost(self, i: int, stage: str, reason: str) -> dict[str, Any]:
        job = self._workers[i].job or {}
        self._retire(i)
        return {"index": job.get("index"), "phase": job.get("phase", "all"), "status": "rejected", "stage": stage, "reason": reason,
                "task": job.get("task"), "retry": bool(job.get("retry")), "seconds": {}}

    def close(self) -> None:
        """Every worker asked to exit, then killed with what it left running (judge.workers.Child.close)."""
        for w in self._workers:
            if w.child is not None:
                w.child.request_exit()
        for w in self._workers:
            if w.child is not None:
                w.child.close()
        shutil.rmtree(self._folder, ignore_errors=True)


# ---- the form of a result ------------------------------------------------------------------------


def _number(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def malformed(result: Any, job: dict[str, Any]) -> str:
    """Why `result` cannot be the worker's answer to `job` ('' when its form is right): everything
    the pipeline and its report read of a result, so that a forged one is that job's rejection,
    never an error in the parent. What a well-formed forgery claims is not checked (the task code
    ran in the process that examined it)."""
    if not isinstance(result, dict):
        return f"it is not a mapping ({type(result).__name__})"
    if type(result.get("index")) is not int or result["index"] != job.get("index"):
        return f"its index {str(result.get('index'))[:40]!r} is not the job's"
    if result.get("phase") != job.get("phase", "all") or result.get("retry") is not bool(job.get("retry")):
        return "its phase or retry flag is not the job's"
    status, stage = result.get("status"), result.get("stage")
    if not (status == "accepted" and stage is None or status == "rejected" and stage in (*STAGES, "error")):
        return f"status {str(status)[:40]!r} with stage {str(stage)[:40]!r}"
    seconds = result.get("seconds")
    if not isinstance(result.get("reason"), str) or not isinstance(seconds, dict) or not all(
            isinstance(k, str) and _number(v) for k, v in seconds.items()):
        return "its reason or seconds are malformed"
    task = result.get("task")
    if isinstance(task, dict) and job.get("source") is not None and task.get("source") != job["source"]:
        return "its task's source is not the job's"  # what is exported and timed must be what was examined
    if status == "accepted":
        return _accepted_task(task, result["phase"])
    if task is not None and not isinstance(task, dict):
        return "its task is not a mapping"
    if stage == "contaminated" and not _contamination(task):
        return "a contaminated task without its id, name and matches"
    return ""


def _accepted_task(task: Any, phase: str) -> str:
    """Why an accepted result's task cannot be selected and exported ('' when it can)."""
    from kernelwright.problems.similarity import tokens
    from kernelwright.synth.export import validate_tasks

    if not isinstance(task, dict) or not isinstance(task.get("id"), str) or not isinstance(task.get("source"), str):
        return "an accepted task without an id and a source"
    if not isinstance(task.get("ops"), list) or not all(isinstance(x, str) for x in task["ops"]):
        return "an accepted task whose ops are not a list of names"
    if not _number(task.get("measured_ms" if phase == "time" else "proxy_ms")):
        return "an accepted task without its runtime"
    try:
        validate_tasks([task])
        tokens(task["source"])  # the parent's duplicate check reads its token stream
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        return f"an accepted task that cannot be exported: {str(exc)[:200]}"
    return ""


def _contamination(task: Any) -> bool:
    matches = task.get("contamination", []) if isinstance(task, dict) else None
    return (isinstance(matches, list) and "id" in task and "name" in task
            and all(isinstance(m, dict) and "reference" in m and "similarity" in m for m in matches))
