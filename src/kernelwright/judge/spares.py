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

At most one spare per (device, environment), one at a time being made. A spare reserves its
context (judge.memory.CTX) in the device's memory ledger for its whole life, without waiting: when
the device is too full for that there is no spare. It goes after `KERNELWRIGHT_SPARE_IDLE_S`
seconds idle (default 60) and at exit; its teardown, like its warm-up, holds the device's shared
lock. `KERNELWRIGHT_SPARE_CHILDREN`: `auto` (default: CUDA only, where the context is what a spare
saves), `on` (every device; the tests use it on the CPU backend), `off`.

What an earlier candidate could do to a spare made while it ran (where the children are not sandboxed,
any process of the user's can signal or trace another, as it can the fork server and the warm
reference children): stop it, kill it, write into its log. So `take` asks the spare for a round
trip first and refuses one that is stopped, traced, dead or slow to answer, and empties its log: the next
evaluation then forks its own child, as without spares.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwright.judge import memory, sandbox
from kernelwright.judge.gpulock import device_key, device_lock
from kernelwright.judge.workers import Child, ChildConfig, ChildError

log = logging.getLogger(__name__)

WARM_TIMEOUT_S = 120.0  # creating a CUDA context; a loaded 2-core machine is slow at everything
TAKE_TIMEOUT_S = 5.0  # the round trip that `take` asks of a spare before using it


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
    if not value >= 0:
        raise ValueError(f"KERNELWRIGHT_SPARE_IDLE_S must not be negative, got {raw!r}")
    return value


def check_settings() -> None:
    """ValueError for a malformed setting: said at the start of an evaluation, not inside it."""
    mode()
    idle_s()


@dataclass
class Spare:
    """A candidate child forked and warmed for a config, waiting for its candidate."""

    key: tuple[Any, ...]
    child: Child
    workdir: Path
    device: str
    gpu_index: int
    reservation: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # its memory ledger entry
    ready_at: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        """Tear it down under the device's shared lock (device work, never beside a timing). Never
        call it while this thread holds a device lock: they are not reentrant."""
        try:
            with device_lock(self.device, self.gpu_index, "shared", what="closing a spare candidate child"):
                self.child.close()
        except (OSError, RuntimeError):
            self.child.close()
        self.release()

    def release(self) -> None:
        """Its folder and its memory reservation, once its child is closed (by whoever took it)."""
        self.child.close()  # a second close does nothing
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.reservation.close()


def key(config: ChildConfig, env: dict[str, str]) -> tuple[Any, ...]:
    """What a spare must share with the child it stands in for: role, device, GPU and the whole
    environment the child gets (the working directory aside: a spare has its own)."""
    return (config.role, config.device, config.gpu_index, tuple(sorted(env.items())))


def _stopped(pid: int) -> bool:
    """Whether the process is stopped, traced (state T or t, or a tracer attached), or gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except (OSError, IndexError):
        return True
    return state in ("T", "t", "Z", "X") or _tracer(status) != 0


def _tracer(status: str) -> int:
    """The TracerPid of a /proc/PID/status text (0: none; -1 when the line is missing)."""
    for line in status.splitlines():
        if line.startswith("TracerPid:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return -1
    return -1


class SparePool:
    def __init__(self) -> None:
        self._ready: dict[tuple[Any, ...], Spare] = {}
        self._making: dict[tuple[Any, ...], Path] = {}  # key -> the folder of the spare being made
        self._children: dict[tuple[Any, ...], Child] = {}  # key -> the child being made, once forked
        self._lock = threading.Lock()
        self._closed = False
        self._timer: threading.Timer | None = None

    def take(self, config: ChildConfig) -> Spare | None:
        """A ready spare for this config, checked alive and answering, or None. The caller closes
        its child and then calls its release()."""
        if not enabled(config.device):
            return None
        with self._lock:
            spare = self._ready.pop(key(config, Child.env_for(config)), None)
        if spare is None:
            return None
        if not self._answers(spare):
            spare.close()  # stopped, killed, out of memory: the evaluation forks its own
            return None
        with contextlib.suppress(OSError):
            spare.child.empty_log()  # whatever reached its log while it waited is not this candidate's
        return spare

    @staticmethod
    def _answers(spare: Spare) -> bool:
        child = spare.child
        if not child.alive() or child.pending() or _stopped(child._proc.pid):
            return False
        try:
            child.call("warm", {"device": "none"}, timeout_s=TAKE_TIMEOUT_S)
        except ChildError:
            return False
        return True

    def refill(self, config: ChildConfig) -> None:
        """Make a spare for this config in the background, unless one is ready or being made."""
        if not enabled(config.device):
            return
        k = key(config, Child.env_for(config))
        with self._lock:
            if self._closed or k in self._ready or k in self._making:
                return
            self._making[k] = Path(tempfile.mkdtemp(prefix="kw-spare-"))
            (self._making[k] / sandbox.SPARE_INPUTS).mkdir()  # what the evaluation that takes it copies in (judge.evaluate)
        threading.Thread(target=self._make, args=(k, config), name="kw-spare", daemon=True).start()

    def _make(self, k: tuple[Any, ...], config: ChildConfig) -> None:
        workdir = self._making[k]
        spare: Spare | None = None
        try:
            if self._closed:
                raise RuntimeError("shut down")
            child = Child(ChildConfig(role=config.role, device=config.device, gpu_index=config.gpu_index, workdir=workdir, env=config.env))
            spare = Spare(key(config, child.env), child, workdir, config.device, config.gpu_index)
            with self._lock:
                self._children[k] = child
                if self._closed:  # shut down while it was forked
                    raise RuntimeError("shut down")
            if spare.key != k:
                raise RuntimeError("the environment changed while it was made")
            with device_lock(config.device, config.gpu_index, "shared", what="warming a spare candidate child"):
                reply = child.call("warm", {"device": config.device}, timeout_s=WARM_TIMEOUT_S) or {}
            total = memory.device_bytes({"memory": {"device_total_bytes": reply.get("total_bytes")}})
            if total is not None and (config.device == "cuda" or os.environ.get(memory.FAKE_ENV)):
                spare.reservation.enter_context(memory.admitted(device_key(config.device, config.gpu_index), memory.CTX, total, timeout_s=0))
            spare.ready_at = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - no spare this time; the next evaluation forks its own child
            log.info("no spare candidate child this time: %s", exc)
            if spare is not None:
                spare.close()
            else:
                shutil.rmtree(workdir, ignore_errors=True)
            spare = None
        late = None
        with self._lock:
            self._making.pop(k, None)
            self._children.pop(k, None)
            if spare is not None and (self._closed or k in self._ready):
                late, spare = spare, None
            if spare is not None:
                self._ready[k] = spare
                self._arm()
        if late is not None:
            late.close()

    def _arm(self) -> None:
        """(Under the lock.) Close idle spares after idle_s()."""
        if self._timer is None:
            try:
                wait = min(idle_s(), 30.0)
            except ValueError:
                wait = 0.0  # a malformed setting now: they go at once
            self._timer = threading.Timer(wait or 0.01, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        now = time.monotonic()
        try:
            limit = idle_s()
        except ValueError:
            limit = 0.0
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
        """At exit: no more spares; the ready ones closed, the ones being made killed, their folders removed."""
        with self._lock:
            self._closed = True
            making = list(self._children.values())
            folders = list(self._making.values())
        for child in making:
            child.kill()
        self.close()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


POOL = SparePool()
atexit.register(POOL.shutdown)
