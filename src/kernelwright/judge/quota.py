"""What a confined process may take of the machine where no rlimit reaches: the disk its folders
hold in all (RLIMIT_FSIZE bounds one file at a time), and host memory across all its processes
(RLIMIT_DATA bounds one process's private memory, and misses shared memory: MAP_SHARED, memfd).

A `Watch` is a thread of the judge that looks every WATCH_S at one confined process (a candidate
child, a compiler, a tool over candidate code) and, when it is past a limit, kills its process
group and every process of its uid (or, without a uid of its own, every process it can tell is
the child's) and keeps the reason in `over` for the verdict. What it counts:

- disk: st_blocks of every entry under the writable folders (links not followed, folders walked
  through descriptors, so no path is too long), plus files its processes hold open after
  unlinking them (invisible to a walk); past `files` entries or MAX_DEPTH levels is over too;
- memory: RssAnon + RssShmem of its processes (/proc/PID/status), which counts a page once per
  process that maps it (a forked child's copy-on-write pages too); only when that sum is past the
  limit is the fair share read (Pss_Anon + Pss_Shmem, /proc/PID/smaps_rollup) and that decides.
  Plus the memfds its processes hold (a memfd written and never mapped is in no process's RSS;
  one that is mapped counts twice, so the bound errs low).

It is a look four times a second, not a bound the kernel keeps: what a process writes or touches
in one interval can go past the limit before the look that kills it (a cgroup would be exact; the
machines this runs on do not delegate one to the judge).
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelwright.judge import confine

log = logging.getLogger(__name__)

WATCH_S = 0.25
DISK = 4 << 30  # bytes under a confined process's writable folders, in all
FILES = 100_000  # entries under them
MAX_DEPTH = 256  # folders nested deeper than this are over (no candidate needs them; a walk keeps one descriptor per level)
ENV = "KERNELWRIGHT_SANDBOX_"  # + DISK, FILES, MEMORY: bytes or a count; 0 leaves that one unwatched


def _size(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


@dataclass(frozen=True)
class Limits:
    disk: int  # bytes on disk: its writable folders, and files it holds open unlinked (0: not watched)
    files: int  # entries under its writable folders (0: not watched)
    memory: int  # host memory across its processes, anonymous and shared (0: not watched)


def memory_total() -> int:
    """The machine's memory in bytes (/proc/meminfo), 0 where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def limits() -> Limits:
    """The limits from KERNELWRIGHT_SANDBOX_DISK / _FILES / _MEMORY, else the defaults (memory:
    three quarters of the machine's, as RLIMIT_DATA per process). ValueError names a bad setting."""

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

    return Limits(disk=read("DISK", DISK), files=read("FILES", FILES), memory=read("MEMORY", memory_total() * 3 // 4))


# ---- disk ---------------------------------------------------------------------------------------


class _Over(Exception):
    pass


def disk_use(roots: Sequence[str | Path], *, stop_bytes: int = 0, stop_files: int = 0) -> tuple[int, int]:
    """(bytes on disk, entries) under `roots`, links not followed; raises _Over with the reason as
    soon as the bytes pass `stop_bytes` or the entries `stop_files` (0: no stop), or a folder is
    nested deeper than MAX_DEPTH. A root that does not exist counts nothing."""
    total = entries = 0
    seen: set[tuple[int, int]] = set()  # hard links count once

    def count(st: os.stat_result) -> None:
        nonlocal total, entries
        entries += 1
        if stop_files and entries > stop_files:
            raise _Over(f"more than {stop_files} files and folders in its writable folders")
        if st.st_nlink > 1:
            if (st.st_dev, st.st_ino) in seen:
                return
            seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
        if stop_bytes and total > stop_bytes:
            raise _Over(f"more than {_size(stop_bytes)} on disk in its writable folders")

    def walk(fd: int, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _Over(f"folders nested more than {MAX_DEPTH} deep in its writable folders")
        with os.scandir(fd) as it:
            names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for name, is_dir in names:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            count(st)
            if is_dir and stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError:
                    continue
                try:
                    walk(sub, depth + 1)
                finally:
                    os.close(sub)

    for root in dict.fromkeys(str(r) for r in roots):
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            walk(fd, 1)
        finally:
            os.close(fd)
    return total, entries


def hidden_files(pids: Sequence[int]) -> tuple[int, int]:
    """What the processes hold open that no folder shows, each file once: (bytes of unlinked files,
    bytes of memfds). The first is disk (or a tmpfs), the second memory."""
    unlinked = memfds = 0
    seen: set[tuple[int, int]] = set()
    for pid in pids:
        base = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(base)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{base}/{fd}")
            except OSError:
                continue
            memfd = target.startswith("/memfd:")
            if not (memfd or target.endswith(" (deleted)")):
                continue
            try:
                st = os.stat(f"{base}/{fd}")
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                if memfd:
                    memfds += st.st_blocks * 512
                else:
                    unlinked += st.st_blocks * 512
    return unlinked, memfds


# ---- processes and memory -----------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    got: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                name, _, value = line.partition(b":")
                if name in (b"Uid", b"PPid", b"NSpgid", b"NSsid", b"RssAnon", b"RssShmem"):
                    parts = value.split()
                    if parts:
                        got[name.decode()] = int(parts[0]) * (1024 if name.startswith(b"Rss") else 1)
    except (OSError, ValueError):
        pass
    return got


def processes(pid: int, uid: int | None) -> dict[int, dict[str, int]]:
    """The processes that are the confined child `pid`'s, with their status fields: with a uid of
    its own, every process of that uid and `pid` itself; without, `pid`, its descendants, and
    whatever is in its process group or session (a daemon that left both and was handed to
    another parent is not seen: the fork server's sweep and the uid are what catch it)."""
    every: dict[int, dict[str, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _status(int(name))
            if st:
                every[int(name)] = st
    if uid is not None:
        return {p: st for p, st in every.items() if p == pid or st.get("Uid") == uid}
    mine = {p for p, st in every.items() if p == pid or st.get("NSpgid") == pid or st.get("NSsid") == pid}
    grew = True
    while grew:  # descendants
        more = {p for p, st in every.items() if p not in mine and st.get("PPid") in mine}
        grew = bool(more)
        mine |= more
    return {p: every[p] for p in mine}


def fair_share(pid: int) -> int | None:
    """Pss_Anon + Pss_Shmem of a process (/proc/PID/smaps_rollup): its share of each page it maps,
    so a page that forked processes share counts once in all; None where the file lacks them."""
    got: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                name, _, value = line.partition(b":")
                if name in (b"Pss_Anon", b"Pss_Shmem"):
                    got[name.decode()] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return sum(got.values()) if len(got) == 2 else None


def memory_use(procs: dict[int, dict[str, int]], limit: int = 0) -> int:
    """Host memory across the processes: RssAnon + RssShmem summed, and where that passes `limit`,
    the fair share (fair_share) instead, for the processes whose file has it."""
    quick = sum(st.get("RssAnon", 0) + st.get("RssShmem", 0) for st in procs.values())
    if not limit or quick <= limit:
        return quick
    total = 0
    for pid, st in procs.items():
        share = fair_share(pid)
        total += share if share is not None else st.get("RssAnon", 0) + st.get("RssShmem", 0)
    return total


# ---- the watch ----------------------------------------------------------------------------------


def look(pid: int, roots: Sequence[str | Path], uid: int | None, lim: Limits) -> tuple[str, dict[int, dict[str, int]]]:
    """One look: the reason the child is over a limit ('' when it is not), and its processes."""
    procs = processes(pid, uid)  # also what a kill without a uid reaches
    try:
        if lim.disk or lim.files:
            used, _ = disk_use(roots, stop_bytes=lim.disk, stop_files=lim.files)
        else:
            used = 0
    except _Over as exc:
        return str(exc), procs
    unlinked, memfds = hidden_files(list(procs))
    if lim.disk and used + unlinked > lim.disk:
        return f"more than {_size(lim.disk)} on disk ({_size(used)} in its writable folders, {_size(unlinked)} in files it holds open unlinked)", procs
    if lim.memory:
        mem = memory_use(procs, lim.memory) + memfds  # a memfd's pages count again where a process also maps them (the bound errs low)
        if mem > lim.memory:
            return f"more than {_size(lim.memory)} of host memory across its {len(procs)} process(es) ({_size(mem)})", procs
    return "", procs


class Watch:
    """A thread that looks at the confined process `pid` every `every_s` until stopped; when it
    is over a limit, kills it (kill()) and keeps the reason in `over`."""

    def __init__(self, pid: int, roots: Sequence[str | Path], *, uid: int | None, lim: Limits | None = None,
                 every_s: float = WATCH_S) -> None:
        self.pid, self.roots, self.uid = pid, [str(r) for r in roots], uid
        self.limits = lim if lim is not None else limits()
        self.every_s = every_s
        self.over = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.limits.disk or self.limits.files or self.limits.memory:
            self._thread = threading.Thread(target=self._run, name=f"kw-watch-{pid}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                reason, procs = look(self.pid, self.roots, self.uid, self.limits)
            except Exception:  # noqa: BLE001 - a look that fails is skipped, never the judge's thread dying loud
                log.debug("watch of %s: a look failed", self.pid, exc_info=True)
                continue
            if reason and not self._stop.is_set():
                self.over = f"the sandbox killed it: {reason}"
                log.warning("child %s: %s", self.pid, self.over)
                self.kill(procs)
                return

    def kill(self, procs: dict[int, dict[str, int]]) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.uid is not None:
            confine.kill_uid(self.uid)
            return
        for p in procs:  # its descendants, group and session, read a moment ago
            if p != os.getpid():
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def stop(self) -> None:
        """No more looks (the caller is killing or has reaped the process: its pid may be reused)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
