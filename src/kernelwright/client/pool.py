"""Many devices behind the one door: `Pool(backend, workers=N).evaluate(problem, candidate, policy)`
gives the same Verdict as `Judge().evaluate`, judged by one of N workers, each holding one
device's warm judge (a `JudgeService` with one worker thread, so a GPU judges one candidate at a time).

Backends:
- `ray`: an actor per worker in a placement group (`num_gpus=1` each on CUDA, a CPU each
  otherwise), on a running cluster (`address`) or a local one; Ray must be installed (the `ray`
  extra). Requests and verdicts travel through Ray's object store, never as paths.
- `local`: the same worker code in a process of its own per worker on this machine (where Ray is
  missing, or on a GPU machine with no package index). On CUDA worker i sees GPU i alone.

Every request carries the problem's bytes, the candidate's files and the whole policy (the wire
form `kernelwright serve` takes). A worker that dies with a request in flight (a kernel that took
the device down, a killed node), or that holds one request past `deadline_s` (stuck), is
replaced; the request is tried once more on another worker and otherwise ends `infra_error`. A
verdict of `infra_error`, or a job the worker's judge failed on (the judge's own failure there,
e.g. a device that broke under a worker still alive), is tried once more on another worker too,
when the pool has one; a worker that failed two requests in a row that another worker then
judged is started again. A request is answered once: its future is set once, whatever happens to
the workers.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kernelwright.client.judge import _answer, request_for
from kernelwright.core.records import Status, Verdict, truncate
from kernelwright.judge.policy import Policy
from kernelwright.problems.loader import Problem, load_problem

log = logging.getLogger(__name__)

BACKENDS = ("local", "ray")
START_S = 300.0  # the longest a worker may take to start (import torch, the fork server)
DEADLINE_S = 3600.0  # the longest one request may hold a worker before the worker counts as stuck
FAILS_TO_REPLACE = 2  # a worker that failed this many requests in a row that another worker then judged is started again


class WorkerLost(RuntimeError):
    """A worker died or stopped answering with a request in flight."""


class JudgeWorker:
    """The worker's body, the same under both backends: one device's judge service; `evaluate`
    takes a request in the service's wire form and answers with its job (state, verdict or error)."""

    def __init__(self, device: str = "auto", root: str | None = None) -> None:
        from kernelwright.client.service import JudgeService

        self.device = device
        self.service = JudgeService(workers=1, root=Path(root) if root else None)  # its jobs' folders under root

    def evaluate(self, request: dict[str, Any]) -> dict[str, Any]:
        request = {**request, "device": self.device if request.get("device", "auto") == "auto" else request["device"]}
        try:
            job = self.service.submit(request)
        except ValueError as exc:
            return {"state": "failed", "error": {"kind": "usage", "message": str(exc)}, "verdict": None}
        job.finished.wait()
        return job.to_dict()

    def info(self) -> dict[str, Any]:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return {"pid": os.getpid(), "host": socket.gethostname(), "device": self.device, "cuda_visible_devices": visible,
                "gpu": _gpu_name(visible) if self.device == "cuda" else None}

    def close(self) -> None:
        self.service.close()


def _gpu_name(visible: str | None) -> str | None:
    """The name of the worker's GPU (its first visible one) as nvidia-smi gives it, or None."""
    import subprocess

    first = (visible or "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", "-i", first, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def lost_verdict(problem: Problem, policy: Policy, why: str) -> Verdict:
    """The judge's own failure, as a verdict: no worker could finish the request."""
    return Verdict(status=Status.INFRA_ERROR, problem={"name": problem.name, "hash": problem.hash, "size": None},
                   candidate={"hash": None, "build_path": None}, policy=policy.to_dict(), log=why[:2000],
                   created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


class Pool:
    """N workers on one backend; `evaluate` and `submit` as the client's Judge has them."""

    def __init__(self, backend: str = "local", *, workers: int | None = None, device: str = "auto", address: str | None = None,
                 retries: int = 1, deadline_s: float = DEADLINE_S) -> None:
        """`workers`: None gives one per GPU (the cluster's under Ray, the visible ones locally) on
        CUDA and 2 on the CPU; `device` auto is CUDA where there are GPUs (the cluster's under Ray);
        `deadline_s`: how long one request may hold a worker (the judge's own limits end every
        verdict well before the default) before the worker is replaced as stuck."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if (workers is not None and workers < 1) or retries < 0 or not deadline_s > 0:
            raise ValueError(f"workers must be at least 1, retries at least 0 and deadline_s positive, got {workers}, {retries} and {deadline_s}")
        self.deadline_s = float(deadline_s)
        if address is not None and backend != "ray":
            raise ValueError("an address names a Ray cluster: it needs backend='ray'")
        if device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device must be auto, cuda or cpu, got {device!r}")
        self.retries = retries
        if backend == "ray":
            from kernelwright.client.pool_ray import RayWorkers

            self._workers: Any = RayWorkers(workers, device, address)
        else:
            from kernelwright.client.pool_local import LocalWorkers

            self._workers = LocalWorkers(workers, device)
        self.device, self.size = self._workers.device, self._workers.size  # as resolved by the backend
        self._cv = threading.Condition()  # guards _idle and _waiting; notified when a worker is free again and when the pool closes
        self._idle: list[int] = list(range(self.size))  # the workers free to take a request, the longest idle first
        self._waiting: list[tuple[object, int | None]] = []  # requests waiting for a worker, first come first: (token, avoid)
        # twice the workers: a request waiting for another worker than the one it failed on holds no worker, so
        # the one it avoids can take the next request meanwhile
        self._run = ThreadPoolExecutor(max_workers=2 * self.size, thread_name_prefix="kw-pool")
        self.replaced = 0  # workers started again: lost, stuck, or failing requests that another worker then judged
        self.retried = 0  # requests sent again after their worker was lost
        self.sent = 0  # requests sent to workers, retries included
        self.in_flight: set[int] = set()  # the workers judging a request now
        self._fails: dict[int, int] = {}  # each worker's requests in a row that it failed and another worker then judged
        self._gen: dict[int, int] = {}  # each worker's generation: one more at each request it judges and each restart
        self._restarting: set[int] = set()  # the workers a restart thread is waiting for or starting again
        self._restarts: list[threading.Thread] = []  # the restart threads, joined at close
        self._closing = threading.Event()
        self._lock = threading.Lock()

    def submit(self, problem: Problem | str | Path, candidate: str | Path, policy: Policy | None = None) -> Future:
        """A future of the verdict. A malformed problem or candidate, or a policy a pool cannot
        honour, raises here (ValueError, ProblemError), as Judge does."""
        policy = policy or Policy()
        self.check(policy)
        problem = problem if isinstance(problem, Problem) else load_problem(problem)
        request = request_for(problem, Path(candidate), policy, self.device)
        return self._run.submit(self._one, problem, policy, request)

    def evaluate(self, problem: Problem | str | Path, candidate: str | Path, policy: Policy | None = None) -> Verdict:
        return self.submit(problem, candidate, policy).result()

    def submit_request(self, problem: Problem, policy: Policy, request: dict[str, Any]) -> Future:
        """A future of the verdict of a request already in the wire form (`kernelwright serve --ray`
        passes its callers' on); `problem` and `policy` are the request's own, loaded."""
        self.check(policy)
        return self._run.submit(self._one, problem, policy, request)

    @staticmethod
    def check(policy: Policy) -> None:
        """ValueError for a policy a pool cannot honour."""
        if policy.gpu_index != 0:
            raise ValueError(f"a pool's worker sees its one GPU as index 0: gpu_index {policy.gpu_index} does not apply (leave it 0)")
        if policy.baselines == "cached":
            raise ValueError("cached baselines are read from a store, and a pool's workers have none of the driver's: "
                             "measure them (the default) or skip them")

    def _take(self, avoid: int | None) -> int | None:
        """A free worker's slot, never `avoid` (the one the request just failed on); None once the
        pool closes. Requests are served first come, first served, each the worker idle longest;
        a request passes one ahead of it only when that one cannot use any free worker. No slot is
        held while waiting, so requests that avoid each other's workers cannot hold each other up."""
        me = object()
        with self._cv:
            self._waiting.append((me, avoid))
            try:
                while not self._closing.is_set():
                    slot = self._granted(me)
                    if slot is not None:
                        self._idle.remove(slot)
                        return slot
                    self._cv.wait()
                return None
            finally:
                self._waiting.remove((me, avoid))
                self._cv.notify_all()  # a request behind this one may use what it passed over

    def _granted(self, me: object) -> int | None:
        """The slot the waiting request `me` gets now, if any (under _cv): the free workers handed to
        the waiting requests in their order, each the longest idle one it may use."""
        free = [x for x in self._idle if x not in self._restarting]  # a worker waited for by its restart goes to it
        for token, avoid in self._waiting:
            pick = next((x for x in free if x != avoid), None)
            if token is me:
                return pick
            if pick is not None:
                free.remove(pick)  # an earlier request's
        return None

    def _strike(self, failed_on: list[tuple[int, int]], judged_on: int) -> None:
        """The workers that failed a request another worker then judged: a strike each, counted only
        if the worker has judged nothing and not been started again since it failed (its generation
        is the same), so that strikes run in a row. After FAILS_TO_REPLACE, the worker is started
        again (a new process or actor, a new CUDA context) by one restart thread per worker, which
        takes the worker as soon as it is free. A request that fails everywhere strikes no one: the
        request, not the workers, is the likely cause."""
        for slot, gen in set(failed_on):
            if slot == judged_on:
                continue
            with self._lock:
                if self._gen.get(slot, 0) != gen:
                    continue
                self._fails[slot] = self._fails.get(slot, 0) + 1
                due = self._fails[slot] >= FAILS_TO_REPLACE and slot not in self._restarting and not self._closing.is_set()
                if due:
                    self._restarting.add(slot)
            if due:
                t = threading.Thread(target=self._restart, args=(slot,), name=f"kw-pool-restart-{slot}", daemon=True)
                with self._lock:
                    self._restarts = [x for x in self._restarts if x.is_alive()] + [t]
                t.start()

    def _restart(self, slot: int) -> None:
        try:
            with self._cv:
                while slot not in self._idle and not self._closing.is_set():
                    self._cv.wait()
                if self._closing.is_set():
                    return
                self._idle.remove(slot)
            try:
                self._workers.replace(slot)
                self._fresh(slot)
            except Exception as exc:  # noqa: BLE001 - the slot stays empty; whoever takes it next gets WorkerLost and tries again
                if not self._closing.is_set():
                    log.warning("pool worker %d could not be started again: %s: %s", slot, type(exc).__name__, exc)
            finally:
                self._give(slot)
        finally:
            with self._lock:
                self._restarting.discard(slot)

    def _fresh(self, slot: int) -> None:
        """Worker `slot` was started again: a new generation, no strikes."""
        with self._lock:
            self.replaced += 1
            self._fails[slot] = 0
            self._gen[slot] = self._gen.get(slot, 0) + 1

    def _give(self, slot: int) -> None:
        with self._cv:
            self._idle.append(slot)
            self._cv.notify_all()

    def _one(self, problem: Problem, policy: Policy, request: dict[str, Any]) -> Verdict:
        losses: list[str] = []
        failed_on: list[tuple[int, int]] = []  # the workers whose judge failed this request (infra_error, a failed job), with their generation
        avoid: int | None = None
        for attempt in range(self.retries + 1):
            slot = self._take(avoid)
            if slot is None:  # closing
                break
            self.in_flight.add(slot)
            try:
                with self._lock:
                    self.sent += 1
                job = self._workers.call(slot, request, self.deadline_s)
            except WorkerLost as exc:
                losses.append(f"worker {slot}: {exc}")
                if self._closing.is_set():  # lost because the pool is closing: neither replaced nor retried
                    break
                try:
                    self._workers.replace(slot)
                    self._fresh(slot)
                except Exception as again:  # noqa: BLE001 - the slot stays empty; whoever takes it next tries again
                    losses.append(f"worker {slot} could not be started again: {type(again).__name__}: {again}")
                with self._lock:
                    self.retried += attempt < self.retries
                avoid = slot if self.size > 1 else None  # once more elsewhere, not on its replacement
                continue
            finally:
                self.in_flight.discard(slot)
                self._give(slot)
            error = job.get("error") or {}
            failed = job.get("state") != "done" and error.get("kind") not in ("problem", "usage")  # the judge broke there
            verdict = None if failed else _answer(job)  # a malformed problem or request raises, as Judge does
            if verdict is None or verdict.status is Status.INFRA_ERROR:
                what = (f"worker {slot}'s judge failed ({job.get('state')}): {str(error.get('message', ''))[:300]}" if verdict is None
                        else f"worker {slot} answered infra_error: {verdict.log[:300]}")
                if attempt < self.retries and self.size > 1 and not self._closing.is_set():
                    losses.append(what)
                    with self._lock:
                        failed_on.append((slot, self._gen.get(slot, 0)))
                    avoid = slot  # tried once more on another worker
                    with self._lock:
                        self.retried += 1
                    continue
                if verdict is None:
                    losses.append(what)
                    break
            else:  # judged here: this worker's run of failures ends, and those another worker failed on count against them
                with self._lock:
                    self._fails[slot] = 0
                    self._gen[slot] = self._gen.get(slot, 0) + 1
                self._strike(failed_on, slot)
            if losses:
                verdict = dataclasses.replace(verdict, log=truncate(f"{verdict.log}\n[pool] judged again after: " + "; ".join(losses)))
            return verdict
        why = "the pool was closed" if self._closing.is_set() else "no worker finished the request"
        return lost_verdict(problem, policy, f"{why} ({len(losses)} lost): " + "; ".join(losses))

    def info(self) -> list[dict[str, Any]]:
        return self._workers.info()

    def gpus(self) -> list[str]:
        """The workers' GPUs by name (CUDA; empty where nvidia-smi did not say)."""
        return sorted({i["gpu"] for i in self.info() if i.get("gpu")})

    def kill(self, i: int) -> None:
        """Worker i killed as a fault would kill it (a kernel that took the device down): tests use it."""
        self._workers.kill(i)

    def close(self) -> None:
        """Requests not yet sent are cancelled; those in flight end with their workers."""
        self._closing.set()
        with self._cv:
            self._cv.notify_all()  # a request waiting for a free worker ends lost
        self._run.shutdown(wait=False, cancel_futures=True)
        self._workers.close()  # a request in flight ends lost, and is neither retried nor its worker replaced
        self._run.shutdown(wait=True)
        for t in list(self._restarts):  # a restart under way ends (the backend, closed, starts nothing more)
            t.join()
        self._workers.shutdown()  # after the threads: a Ray this pool started

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
