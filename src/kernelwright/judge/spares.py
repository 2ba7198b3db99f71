"""Spare candidate children: forked ahead of time, their CUDA context already made.

A CUDA candidate child forked from the fork server starts in milliseconds, but its setup then
creates the CUDA context: 0.25-0.3 s of a warm verdict's 1.1 s on the H200 (warm_h200.md). So once
an evaluation has taken its candidate child, the next one is forked in the background and told
`warm` (judge.child_candidate: it creates the context and nothing else) under the device's shared
lock, like any untimed device work (judge.gpulock), so it never overlaps a timing. The next
evaluation on that device with the same environment takes it instead of forking one.

Nothing else changes: a spare has run only the judge's code, it serves exactly one candidate and is
closed with that evaluation like any candidate child, its result channel has its own key, and the
candidate's setup (problem, seeds, guards, snapshots) runs in it exactly as in a fresh child. Its
own folder (its log, its working directory) goes with it.

At most one spare per (device, environment), one at a time being made; an idle spare holds a CUDA
context (about 0.7 GiB on the H200) outside judge.memory's ledger, so it goes after
`KERNELWRIGHT_SPARE_IDLE_S` seconds (default 60) and at exit. `KERNELWRIGHT_SPARE_CHILDREN`: `auto`
(default: CUDA only, where the context is what a spare saves), `on` (every device; the tests use it
on the CPU backend), `off`.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwright.judge.gpulock import device_lock
from kernelwright.judge.workers import Child, ChildConfig, ChildError, child_env

log = logging.getLogger(__name__)

WARM_TIMEOUT_S = 120.0  # creating a CUDA context; a loaded 2-core machine is slow at everything


def mode() -> str:
    raw = os.environ.get("KERNELWRIGHT_SPARE_CHILDREN", "auto").strip().lower() or "auto"
    if raw not in ("auto", "on", "off"):
        raise ValueError(f"KERNELWRIGHT_SPARE_CHILDREN must be auto, on or off, got {raw!r}")
    return raw


def enabled(device: str) -> bool:
    m = mode()
    return m == "on" or (m == "auto" and device == "cuda")


def idle_s() -> float:
    raw = os.environ.get("KERNELWRIGHT_SPARE_IDLE_S", "").strip()
    try:
        value = float(raw) if raw else 60.0
    except ValueError:
        raise ValueError(f"KERNELWRIGHT_SPARE_IDLE_S must be a number of seconds, got {raw!r}") from None
    return max(0.0, value)


@dataclass
class Spare:
    """A candidate child forked and warmed for a config, waiting for its candidate."""

    key: tuple[Any, ...]
    child: Child
    workdir: Path
    ready_at: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        self.child.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def key(config: ChildConfig) -> tuple[Any, ...]:
    """What a spare must share with the child it stands in for: role, device, GPU and the whole
    environment the child would get now (the working directory aside: a spare has its own)."""
    return (config.role, config.device, config.gpu_index, tuple(sorted(child_env(config).items())))


class SparePool:
    def __init__(self) -> None:
        self._ready: dict[tuple[Any, ...], Spare] = {}
        self._making: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._timer: threading.Timer | None = None

    def take(self, config: ChildConfig) -> tuple[Child, Path] | None:
        """A ready spare for this config (its child and its own folder), or None."""
        if not enabled(config.device):
            return None
        k = key(config)
        with self._lock:
            spare = self._ready.pop(k, None)
        if spare is None:
            return None
        if not spare.child.alive() or spare.child.pending():
            spare.close()  # died idle (killed, out of memory): the evaluation forks its own
            return None
        return spare.child, spare.workdir

    def refill(self, config: ChildConfig) -> None:
        """Make a spare for this config in the background, unless one is ready or being made."""
        if not enabled(config.device):
            return
        k = key(config)
        with self._lock:
            if self._closed or k in self._ready or k in self._making:
                return
            self._making.add(k)
        threading.Thread(target=self._make, args=(k, config), name="kw-spare", daemon=True).start()

    def _make(self, k: tuple[Any, ...], config: ChildConfig) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="kw-spare-"))
        spare: Spare | None = None
        try:
            child = Child(ChildConfig(role=config.role, device=config.device, gpu_index=config.gpu_index, workdir=workdir, env=config.env))
            spare = Spare(k, child, workdir)
            with device_lock(config.device, config.gpu_index, "shared", what="warming a spare candidate child"):
                child.call("warm", {"device": config.device}, timeout_s=WARM_TIMEOUT_S)
            spare.ready_at = time.monotonic()
        except (ChildError, OSError, RuntimeError) as exc:
            log.info("no spare candidate child this time: %s", exc)
            if spare is not None:
                spare.close()
            else:
                shutil.rmtree(workdir, ignore_errors=True)
            spare = None
        finally:
            with self._lock:
                self._making.discard(k)
                if spare is not None and (self._closed or k in self._ready):
                    late, spare = spare, None
                else:
                    late = None
                if spare is not None:
                    self._ready[k] = spare
                    self._arm()
        if late is not None:
            late.close()

    def _arm(self) -> None:
        """(Under the lock.) Close idle spares after idle_s()."""
        if self._timer is None:
            self._timer = threading.Timer(min(idle_s(), 30.0) or 0.01, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        now, limit = time.monotonic(), idle_s()
        with self._lock:
            self._timer = None
            old = [k for k, s in self._ready.items() if now - s.ready_at >= limit]
            gone = [self._ready.pop(k) for k in old]
            if self._ready:
                self._arm()
        for spare in gone:
            spare.close()

    def ready(self) -> int:
        with self._lock:
            return len(self._ready)

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Until no spare is being made (tests and benchmarks); whether that happened in time."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._making:
                    return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        """Close every ready spare; spares still being made close when they are done."""
        with self._lock:
            gone, self._ready = list(self._ready.values()), {}
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        for spare in gone:
            spare.close()

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
        self.close()


POOL = SparePool()
atexit.register(POOL.shutdown)
