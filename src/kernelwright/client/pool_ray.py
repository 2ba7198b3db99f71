"""The pool's `ray` backend: one actor per worker, each `JudgeWorker`, in a placement group of one
bundle per worker ({GPU: 1, CPU: 1} on CUDA, {CPU: 1} otherwise), on the cluster at `address` or a
local one started here. Ray gives each CUDA actor its GPU alone (CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from kernelwright.client.pool import START_S, JudgeWorker, WorkerLost

log = logging.getLogger(__name__)
CLOSE_S = 10.0  # the longest close waits for the actors' own close before killing them


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("backend 'ray' needs Ray: pip install 'kernelwright[ray]' (or use backend 'local')") from None
    return ray


class RayWorkers:
    def __init__(self, n: int | None, device: str, address: str | None) -> None:
        ray = self._ray = _ray()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._started = not ray.is_initialized()
        if self._started:
            # the cluster at `address`; else a new local Ray of all this machine's CPUs (address "local": never one
            # that RAY_ADDRESS or `ray start` left)
            kw: dict[str, Any] = {"address": address} if address else {"address": "local", "num_cpus": max(n or 0, 2, os.cpu_count() or 1)}
            ray.init(**kw, include_dashboard=False, log_to_driver=False)
        elif address:
            log.warning("Ray is already initialized in this process: the pool uses its cluster, not %s", address)
        self._closed = False
        self._lock = threading.Lock()
        self._actors: list[Any] = []
        self._group: Any = None
        try:
            gpus = int(ray.cluster_resources().get("GPU", 0))  # the cluster's, not this driver's
            self.device = device if device != "auto" else ("cuda" if gpus else "cpu")
            self.size = n if n is not None else (gpus if self.device == "cuda" else 2)
            if self.device == "cuda" and gpus < self.size:
                raise ValueError(f"{self.size} workers on cuda need {self.size} GPUs; the Ray cluster has {gpus}")
            bundle = {"GPU": 1, "CPU": 1} if self.device == "cuda" else {"CPU": 1}
            self._strategy, self._actor, self._gpus = PlacementGroupSchedulingStrategy, ray.remote(JudgeWorker), int(self.device == "cuda")
            self._actors = [None] * self.size
            self.infos: list[dict[str, Any]] = [{} for _ in range(self.size)]
            self._group = placement_group([dict(bundle) for _ in range(self.size)], strategy="PACK")
            done, _ = ray.wait([self._group.ready()], timeout=START_S)
            if not done:
                raise RuntimeError(f"Ray could not place {self.size} workers of {bundle} in {START_S:.0f} s: {ray.available_resources()}")
            for i in range(self.size):
                self._actors[i] = self._start(i)
        except BaseException:
            self.close()
            self.shutdown()
            raise

    def _start(self, i: int) -> Any:
        ray = self._ray
        actor = self._actor.options(num_gpus=self._gpus, num_cpus=1, max_restarts=0, max_task_retries=0,
                                    scheduling_strategy=self._strategy(placement_group=self._group, placement_group_bundle_index=i)
                                    ).remote(self.device)
        try:
            ref, deadline = actor.info.remote(), time.monotonic() + START_S
            while not ray.wait([ref], timeout=1.0)[0]:  # the pool's close ends the wait (its placement group is gone)
                if self._closed or time.monotonic() > deadline:
                    raise WorkerLost("the pool is closed" if self._closed else f"no answer in {START_S:.0f} s")
            self.infos[i] = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a worker that cannot start is lost, whatever Ray says why
            if ray.is_initialized():  # never a Ray started again by the call itself, after the pool shut its own down
                ray.kill(actor, no_restart=True)
            raise WorkerLost(f"worker {i} did not start: {type(exc).__name__}: {exc}") from None
        return actor

    def call(self, i: int, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """The actor's job for the request; WorkerLost when it dies first or holds it past `timeout` s
        (the pool then replaces it, which kills it)."""
        ray = self._ray
        actor = self._actors[i]
        if actor is None:
            raise WorkerLost(f"worker {i} is not running")
        try:
            return ray.get(actor.evaluate.remote(request), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise WorkerLost(f"worker {i} said nothing in {timeout:.0f} s") from None
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError, ray.exceptions.NodeDiedError) as exc:
            raise WorkerLost(f"worker {i}: {type(exc).__name__}") from None

    def replace(self, i: int) -> None:
        with self._lock:
            if self._closed:
                raise WorkerLost("the pool is closed")
            old, self._actors[i] = self._actors[i], None
        if old is not None:
            try:
                self._ray.kill(old, no_restart=True)
            except Exception:  # noqa: BLE001 - it is gone already
                pass
        actor = self._start(i)
        with self._lock:
            if not self._closed:
                self._actors[i] = actor
                return
        self._ray.kill(actor, no_restart=True)  # the pool closed while it started
        raise WorkerLost("the pool is closed")

    def kill(self, i: int) -> None:
        """Worker i killed as a fault would kill it (tests): its request in flight is lost."""
        self._ray.kill(self._actors[i], no_restart=True)

    def info(self) -> list[dict[str, Any]]:
        return list(self.infos)

    def close(self) -> None:
        """Every actor asked to close at once (its service's folder removed), then all killed; the placement group removed."""
        ray = self._ray
        with self._lock:
            self._closed = True
            actors, self._actors = [a for a in self._actors if a is not None], [None] * len(self._actors)
        refs = []
        for a in actors:
            try:
                refs.append(a.close.remote())
            except Exception:  # noqa: BLE001 - dead already
                pass
        if refs:
            try:
                ray.wait(refs, num_returns=len(refs), timeout=CLOSE_S)  # a busy actor answers after its request: not waited for
            except Exception:  # noqa: BLE001
                pass
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if self._group is not None:
            try:
                ray.util.remove_placement_group(self._group)
            except Exception:  # noqa: BLE001
                pass

    def shutdown(self) -> None:
        """After the pool's threads are done: a Ray this pool started goes; a cluster it joined stays."""
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
