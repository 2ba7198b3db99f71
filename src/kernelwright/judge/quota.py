"""What a confined process may take of the machine where no rlimit reaches: the disk its folders
hold in all (RLIMIT_FSIZE bounds one file at a time), and host memory across all its processes
(RLIMIT_DATA bounds one process's private memory, and misses shared memory: MAP_SHARED, memfd).

A `Watch` is a thread of the judge that looks every WATCH_S at one confined process (a candidate
child, a compiler, a tool over candidate code) and, when it is past a limit, kills its process
group and every process of its uid (or, without a uid of its own, every process it can tell is
the child's, each through a pidfd) and keeps the reason in `over` for the verdict. What it counts
(the counting is judge.quota_usage's):

- disk: st_blocks of every entry under the writable folders (links not followed, folders walked
  through descriptors, so no path is too long), plus files its processes hold open or map after
  unlinking them (invisible to a walk); past `files` entries or MAX_DEPTH levels is over too;
- memory: RssAnon of its processes (/proc/PID/status, or a live thread's where the main thread
  has exited), which counts a page once per process that maps it (a forked child's copy-on-write
  pages too); only when that sum is past the limit is the fair share read (Pss_Anon,
  /proc/PID/smaps_rollup) and that decides. Plus every shmem object its processes hold or map
  (memfds, shared anonymous mappings, whole: a page in one is in no process's RSS once the
  process that touched it has gone). Mappings are sized through /proc/PID/map_files, which only
  root may follow; a non-root judge counts RssShmem (Pss_Shmem) and the memfds held open instead
  (a memfd also mapped then counts twice, so the bound errs low).
- the machine: its available memory (MemAvailable) below MEMORY_FLOOR of the total kills every
  watched process, since the kernel's OOM killer would otherwise pick one (the judge perhaps).

What it fails closed on: a folder or a descriptor table it may not read (a non-root judge's
candidate can make itself non-dumpable or chmod a folder of its own), a look that takes longer
than LOOK_S, and FAILS looks in a row that fail.

It is a look four times a second, not a bound the kernel keeps: what a process writes or touches
in one interval can go past the limit before the look that kills it, and a descriptor sent into a
unix socket and closed is held by no process (a memory cgroup would be exact; the machines this
runs on do not delegate one to the judge).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelwright.judge import uids
from kernelwright.judge.quota_usage import (LOOK_S, Over, budget, disk_use, hidden_files, memory_available, memory_total, memory_use,
                                            processes, size_text)

log = logging.getLogger(__name__)

WATCH_S = 0.25
FAILS = 3  # looks in a row that fail, and it is over
DISK = 4 << 30  # bytes under a confined process's writable folders, in all
FILES = 100_000  # entries under them
ENV = "KERNELWRIGHT_SANDBOX_"  # + DISK, FILES, MEMORY, MEMORY_FLOOR: bytes or a count; 0 leaves that one unwatched


@dataclass(frozen=True)
class Limits:
    disk: int  # bytes on disk: its writable folders, and files it holds open unlinked (0: not watched)
    files: int  # entries under its writable folders (0: not watched)
    memory: int  # host memory across its processes, anonymous and shared (0: not watched)
    floor: int = 0  # the machine's available memory under which every watched process is killed (0: not watched)


def limits() -> Limits:
    """The limits from KERNELWRIGHT_SANDBOX_DISK / _FILES / _MEMORY / _MEMORY_FLOOR, else the
    defaults (memory: three quarters of the machine's, as RLIMIT_DATA per process; the floor: a
    thirty-second of it). ValueError names a bad setting."""

    def read(name: str, default: int) -> int:
        raw = os.environ.get(ENV + name, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{ENV}{name} must be a whole number ({'entries' if name == 'FILES' else 'bytes'}; 0 turns it off), got {raw!r}") from None
        if value < 0:
            raise ValueError(f"{ENV}{name} must be 0 or more, got {value}")
        return value

    total = memory_total()
    return Limits(disk=read("DISK", DISK), files=read("FILES", FILES), memory=read("MEMORY", total * 3 // 4),
                  floor=read("MEMORY_FLOOR", total // 32))


# ---- the watch ----------------------------------------------------------------------------------


MACHINE = "the machine's available memory fell"  # how a floor reason begins: the machine's, not the process's (an infra error)


def _devices(roots: Sequence[str | Path]) -> frozenset[int]:
    found = set()
    for r in roots:
        try:
            found.add(os.stat(r).st_dev)
        except OSError:
            continue
    return frozenset(found)


def look(pid: int, roots: Sequence[str | Path], uid: int | None, lim: Limits,
         procs: dict[int, dict[str, int]] | None = None, read_before: set[int] | None = None) -> tuple[str, dict[int, dict[str, int]]]:
    """One look: the reason the child is over a limit ('' when it is not), and its processes
    (`procs`, else processes(pid, uid)). `read_before`: hidden_files."""
    deadline = time.monotonic() + LOOK_S
    if procs is None:
        procs = processes(pid, uid)
    try:
        budget(deadline)
        used = disk_use(roots, stop_bytes=lim.disk, stop_files=lim.files, deadline=deadline)[0] if (lim.disk or lim.files) else 0
        hidden = hidden_files(procs, deadline, devices=_devices(roots), uid=uid, read_before=read_before)
    except Over as exc:
        return str(exc), procs
    if lim.disk and used + hidden.disk > lim.disk:
        return f"more than {size_text(lim.disk)} on disk ({size_text(used)} in its writable folders, {size_text(hidden.disk)} in files it holds open or maps unlinked)", procs
    if lim.memory:
        # a process whose mappings were all read has every shmem page it maps in an object
        # counted whole: its anonymous memory besides; any other, its RssShmem too (a memfd it
        # also holds then counts twice: the bound errs low)
        mem = memory_use(procs, max(1, lim.memory - hidden.shmem), hidden.mapped) + hidden.shmem
        if mem > lim.memory:
            return f"more than {size_text(lim.memory)} of host memory across its {len(procs)} process(es) ({size_text(mem)})", procs
    if lim.floor:
        avail = memory_available()
        if avail is not None and avail < lim.floor:
            return f"{MACHINE} to {size_text(avail)}, under the floor of {size_text(lim.floor)}, while it ran", procs
    return "", procs


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _signal(fd: int, sig: int) -> bool:
    try:
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False


def _started(pid: int) -> int | None:
    """When the process started (clock ticks after boot, /proc/PID/stat): with its pid, who it is."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


class Watch:
    """A thread that looks at the confined process `pid` every `every_s` until stopped or until
    the process is gone; when it is over a limit, kills it (kill()) and keeps the reason in `over`
    (`machine` when it was the machine's memory floor, not the process's own use). A pidfd taken at
    the start pins the process (its start time where pidfds are missing): once it has been reaped,
    nothing is signalled by its pid or its uid (both may be another process's by then)."""

    def __init__(self, pid: int, roots: Sequence[str | Path], *, uid: int | None, lim: Limits | None = None,
                 every_s: float = WATCH_S, signaller: uids.Signaller | None = None) -> None:
        self.pid, self.roots, self.uid, self.signaller = pid, [str(r) for r in roots], uid, signaller
        self.limits = lim if lim is not None else limits()
        self.every_s = every_s
        self.over = ""
        self.machine = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd = _pidfd(pid)
        self._start = _started(pid)
        self._read: set[int] = set()  # processes whose descriptors were read (hidden_files)
        if self.limits.disk or self.limits.files or self.limits.memory or self.limits.floor:
            self._thread = threading.Thread(target=self._run, name=f"kw-watch-{pid}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        failed = 0
        try:
            while not self._stop.wait(self.every_s):
                if not self._leader_alive():
                    if self._fd is None and self._start is None:  # nothing pins it: it cannot be watched safely
                        reason = "the judge could not pin it (no pidfd, no start time)"
                    else:
                        return  # gone: what it left is the caller's to kill (Child.kill, sandbox.reap)
                else:
                    try:
                        reason, _ = look(self.pid, self.roots, self.uid, self.limits, self.mine(), self._read)
                        failed = 0
                    except Exception as exc:  # noqa: BLE001 - counted: FAILS in a row and it is over
                        failed += 1
                        log.warning("watch of %s: a look failed (%s of %s in a row): %s", self.pid, failed, FAILS, exc)
                        reason = f"the judge could not look at it {FAILS} times in a row ({exc})" if failed >= FAILS else ""
                if reason and not self._stop.is_set():
                    self.machine = reason.startswith(MACHINE)
                    self.over = f"the sandbox killed it: {reason}"
                    log.warning("child %s: %s", self.pid, self.over)
                    self.kill()
                    return
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _leader_alive(self) -> bool:
        """Whether `pid` is still the process watched (not reaped: its pid, group id and uid are
        not another's)."""
        if self._fd is not None:
            return _signal(self._fd, 0)
        return self._start is not None and _started(self.pid) == self._start

    def mine(self) -> dict[int, dict[str, int]]:
        """processes(pid, uid), as far as they are still the child's: once the child itself has been
        reaped, its pid may be another process's (and that one's group and session with it), which
        the kernel allows only when no process of the child's group or session is left."""
        before = self._leader_alive()
        procs = processes(self.pid, self.uid)
        if before and self._leader_alive():
            return procs
        if os.path.exists(f"/proc/{self.pid}"):  # reaped, and its pid taken again: nothing is left that the pid names
            return {p: st for p, st in procs.items() if self.uid is not None and st.get("Uid") == self.uid and p != self.pid}
        return {p: st for p, st in procs.items() if p != self.pid}

    def kill(self) -> None:
        if self.uid is not None:
            if self._leader_alive():  # else its uid may be a new child's by now
                self._killpg()
                uids.kill_uid(self.uid, by=self.signaller)  # by the uid (a helper it cannot signal, judge.uids), never by a pid read from /proc
            return
        # its descendants, group and session, each pinned by a pidfd and then found again before
        # anything is killed (the tree is how they are told; a pid reused in between is not in the
        # second reading unless it is the child's too)
        fds = {p: fd for p in self.mine() if p != os.getpid() and (fd := _pidfd(p)) is not None}
        try:
            again = self.mine()
            self._killpg()
            for p, fd in fds.items():
                if p in again:
                    _signal(fd, signal.SIGKILL)
        finally:
            for fd in fds.values():
                os.close(fd)

    def _killpg(self) -> None:
        if self._leader_alive():
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self) -> None:
        """No more looks (the caller is killing or has reaped the process). The pidfd is closed by
        the thread as it ends (never under a kill it is making)."""
        self._stop.set()
        if self._thread is None:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        elif self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
