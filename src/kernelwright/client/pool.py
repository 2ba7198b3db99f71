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
verdict of `infra_error` (the judge's own failure there, e.g. a device that broke under a worker
still alive) is tried once more on another worker too, when the pool has one. A request is answered
once: its future is set once, whatever happens to the workers.
"""

from __future__ import annotations

import dataclasses
import os
import queue
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

BACKENDS = ("local", "ray")
START_S = 300.0  # the longest a worker may take to start (import torch, the fork server)
DEADLINE_S = 3600.0  # the longest one request may hold a worker before the worker counts as stuck


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
        return {"pid": os.getpid(), "host": socket.gethostname(), "device": self.device,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def close(self) -> None:
        self.service.close()


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
        self._free: queue.Queue[int] = queue.Queue()
        for i in range(self.size):
            self._free.put(i)
        self._run = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="kw-pool")
        self.replaced = 0  # workers started again after one was lost
        self.retried = 0  # requests sent again after their worker was lost
        self.sent = 0  # requests sent to workers, retries included
        self.in_flight: set[int] = set()  # the workers judging a request now
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

    def _take(self, avoid: int | None) -> int:
        """A free worker's slot; not `avoid` (the one a request failed on) when there is another."""
        slot = self._free.get()
        if slot != avoid or self.size == 1:
            return slot
        other = self._free.get()  # waits for another worker to be free
        self._free.put(slot)
        return other

    def _one(self, problem: Problem, policy: Policy, request: dict[str, Any]) -> Verdict:
        losses: list[str] = []
        avoid: int | None = None
        for attempt in range(self.retries + 1):
            if self._closing.is_set():
                break
            slot = self._take(avoid)
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
                    with self._lock:
                        self.replaced += 1
                except Exception as again:  # noqa: BLE001 - the slot stays empty; whoever takes it next tries again
                    losses.append(f"worker {slot} could not be started again: {type(again).__name__}: {again}")
                with self._lock:
                    self.retried += attempt < self.retries
                continue
            finally:
                self.in_flight.discard(slot)
                self._free.put(slot)
            verdict = _answer(job)
            if verdict.status is Status.INFRA_ERROR and attempt < self.retries and self.size > 1 and not self._closing.is_set():
                losses.append(f"worker {slot} answered infra_error: {verdict.log[:300]}")  # tried once more on another worker
                avoid = slot
                with self._lock:
                    self.retried += 1
                continue
            if losses:
                verdict = dataclasses.replace(verdict, log=truncate(f"{verdict.log}\n[pool] judged again after: " + "; ".join(losses)))
            return verdict
        why = "the pool was closed" if self._closing.is_set() else "no worker finished the request"
        return lost_verdict(problem, policy, f"{why} ({len(losses)} lost): " + "; ".join(losses))

    def info(self) -> list[dict[str, Any]]:
        return self._workers.info()

    def kill(self, i: int) -> None:
        """Worker i killed as a fault would kill it (a kernel that took the device down): tests use it."""
        self._workers.kill(i)

    def close(self) -> None:
        """Requests not yet sent are cancelled; those in flight end with their workers."""
        self._closing.set()
        self._run.shutdown(wait=False, cancel_futures=True)
        self._workers.close()  # a request in flight ends lost, and is neither retried nor its worker replaced
        self._run.shutdown(wait=True)
        self._workers.shutdown()  # after the threads: a Ray this pool started

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
