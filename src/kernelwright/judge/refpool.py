"""Warm reference children: one per (problem, policy, device), kept across evaluations.

A reference child never runs candidate code, so it can serve the next candidate of the same problem:
its CUDA context, the loaded problem, its metadata, the determinism check and the empty call's
timing at setup are kept; everything that belongs to one evaluation (the model under that
evaluation's secret init seed, reference outputs, input pools, the compiled baseline) is dropped by
its `reset` command and made afresh for the next. A child is given back only when it is alive and
idle (every reply collected); one that failed, timed out or was left mid-command is closed.

Idle children hold their CUDA context, reserved on the device's memory ledger (judge.memory) and
given up to a verdict of this process that has to wait for memory (one of another process waits
until they expire), so the pool is small and they go after an idle timeout:
`KERNELWRIGHT_WARM_REFERENCES` (default 2, or as many as the service judges at once when that is
more; 0 turns reuse off) and `KERNELWRIGHT_WARM_IDLE_S` (default 300). A service with four workers
judging four problems kept two: whichever two verdicts ended last, so about half of its verdicts
set up a new reference child (17 of 40 on the H200, each about 3 s slower:
benchmarks/results/warm_h200.md). Past the capacity, a second idle child of one key goes before
another key's only one (past_capacity), then the oldest.
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
from typing import Any, Iterator

from kernelwright.judge import forkpool
from kernelwright.judge.workers import Child

log = logging.getLogger(__name__)


DEFAULT_CAPACITY = 2
_at_once = 0  # the most evaluations one service in this process judges at once (keep_for)


def capacity() -> int:
    """How many idle children stay: the environment's figure when it sets one, else the default or
    the service's number of workers, whichever is more."""
    return _int_env("KERNELWRIGHT_WARM_REFERENCES", max(DEFAULT_CAPACITY, _at_once))


def keep_for(workers: int) -> None:
    """A service in this process judges up to `workers` evaluations at once, each of its own problem
    maybe: keep that many idle children unless KERNELWRIGHT_WARM_REFERENCES says otherwise."""
    global _at_once
    _at_once = max(_at_once, workers)


def idle_s() -> float:
    return float(_int_env("KERNELWRIGHT_WARM_IDLE_S", 300))


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


@dataclass
class Warm:
    """A reference child set up for one problem and policy, with what its setup answered."""

    key: tuple[Any, ...]  # what it was set up for (see key())
    child: Child  # the reference child
    meta: dict[str, Any]  # its setup reply
    workdir: Path  # its own folder (its log), removed with it
    uses: int = 0  # evaluations it served after its setup's
    idle_since: float = field(default_factory=time.monotonic)
    reservation: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # its context on the memory ledger while idle

    def close(self) -> None:
        self.child.close()
        self.reservation.close()  # after the process: its context is gone by then
        shutil.rmtree(self.workdir, ignore_errors=True)


def key(problem_hash: str, problem_path: str, device: str, gpu_index: int, setup_args: dict[str, Any]) -> tuple[Any, ...]:
    """Everything a reference child's setup depends on, but the init seed (each evaluation's own)."""
    args = tuple(sorted((k, repr(v)) for k, v in setup_args.items() if k != "init_seed"))
    env = (os.environ.get("KERNELWRIGHT_CACHE"), os.environ.get("CUDA_VISIBLE_DEVICES"))
    return (problem_hash, problem_path, device, gpu_index, args, env, forkpool.import_env_key())


def new_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="kw-reference-"))


class ReferencePool:
    """Idle warm reference children, at most `capacity()` of them, each for at most `idle_s()`."""

    def __init__(self) -> None:
        self._idle: list[Warm] = []
        self._waiting = 0  # verdicts of this process waiting for memory (waiting_for_memory)
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def take(self, k: tuple[Any, ...]) -> Warm | None:
        """An idle child set up for `k`, now the caller's alone; None when there is none."""
        with self._lock:
            expired, why = self._expired(), f"idle past {idle_s():g} s"
            found = next((w for w in reversed(self._idle) if w.key == k and w.child.alive()), None)
            if found is not None:
                self._idle.remove(found)
        _close_all((expired, why))
        if found is not None:
            found.reservation.close()  # the taking verdict's own reservation counts its context
        return found

    def give_back(self, warm: Warm, ledger: tuple[str, int] | None = None) -> None:
        """Keep an idle, alive child for the next evaluation (past the capacity, past_capacity says which go).
        With `ledger` (the device's key and size), the idle child reserves its context on the
        device's memory ledger as a spare does, without waiting: no room, not kept."""
        if capacity() == 0 or not warm.child.alive():
            warm.close()
            return
        if ledger is not None:
            from kernelwright.judge import memory

            try:  # checked beside the returning verdict's own reservation, which counts this context too: strict
                warm.reservation.enter_context(memory.admitted(ledger[0], memory.CTX, ledger[1], timeout_s=0))
            except (TimeoutError, OSError) as exc:
                log.info("no room on the memory ledger for an idle reference child (%s): closed", exc)
                warm.close()
                return
        warm.idle_since = time.monotonic()
        with self._lock:
            late = self._waiting > 0  # a verdict of this process waits for memory (maybe since this child reserved): the context is its
            if not late:
                self._idle.append(warm)
            expired = self._expired()  # the dead and the stale first: they count against no one's capacity
            past = past_capacity(self._idle, capacity())
            gone = {id(w) for w in past}
            self._idle = [w for w in self._idle if id(w) not in gone]
            self._arm()
            stale, over = f"idle past {idle_s():g} s", f"past the pool's capacity of {capacity()}"  # read here: the children are out of the list
        _close_all((expired, stale), (past, over), ([warm] if late else [], "given back while a verdict of this process waits for memory"))

    def _expired(self) -> list[Warm]:
        now, limit = time.monotonic(), idle_s()
        gone = [w for w in self._idle if now - w.idle_since > limit or not w.child.alive()]
        self._idle = [w for w in self._idle if w not in gone]
        return gone

    def _arm(self) -> None:
        """A timer that closes expired children while nothing else calls the pool."""
        if self._timer is None or not self._timer.is_alive():
            self._timer = threading.Timer(min(idle_s(), 30.0) + 0.5, self._sweep)
            self._timer.daemon = True
            self._timer.start()

    def _sweep(self) -> None:
        with self._lock:
            expired, why = self._expired(), f"idle past {idle_s():g} s"
            self._timer = None
            if self._idle:
                self._arm()
        _close_all((expired, why))

    @contextlib.contextmanager
    def waiting_for_memory(self) -> Iterator[int]:
        """For a verdict of this process that was not admitted at once: every idle child is closed
        (its ledger entry with it) and, while the verdict waits, a child given back is closed
        rather than kept; yields how many were closed."""
        with self._lock:
            self._waiting += 1
            idle, self._idle = self._idle, []
        try:
            _close_all((idle, "a verdict of this process waits for memory"))
            yield len(idle)
        finally:
            with self._lock:
                self._waiting -= 1

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        _close_all((idle, "the pool closes"))


def past_capacity(idle: list[Any], cap: int) -> list[Any]:
    """Which of the idle children (oldest first, each with a `key`) go when more than `cap` are
    idle: first the older ones of a key that has a newer idle child too, then the oldest. A second
    child of one problem serves only when two of its verdicts run at once; closing by age alone
    closes another problem's only child instead (the likely cause of three of 40 concurrent
    verdicts setting up a new reference child on an H100: benchmarks/results/warm_h100.md)."""
    over = len(idle) - cap
    if over <= 0:
        return []
    seen: set[Any] = set()
    spare: list[Any] = []
    for w in reversed(idle):  # newest first: the newest of each key stays longest
        if w.key in seen:
            spare.append(w)
        else:
            seen.add(w.key)
    gone = spare[::-1][:over]  # oldest first
    taken = {id(w) for w in gone}
    return gone + [w for w in idle if id(w) not in taken][:over - len(gone)]


def _close_all(*groups: tuple[list[Warm], str]) -> None:
    """Close idle children, given as (children, why) groups, each logged with its why (a dead
    one: its process had ended); every one is asked to exit before any is waited for."""
    for ws, reason in groups:
        for w in ws:
            alive = w.child.alive()
            log.info("closed the idle reference child of %s (%d evaluations served): %s", Path(str(w.key[1])).name, w.uses + 1,
                     reason if alive else "its process had ended")
            w.child.request_exit()
    for ws, _ in groups:
        for w in ws:
            w.close()


POOL = ReferencePool()
atexit.register(POOL.close)
