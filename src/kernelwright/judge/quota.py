"""What a confined process may take of the machine where no rlimit reaches: the disk its folders
hold in all (RLIMIT_FSIZE bounds one file at a time), and host memory across all its processes
(RLIMIT_DATA bounds one process's private memory, and misses shared memory: MAP_SHARED, memfd).

A `Watch` is a thread of the judge that looks every WATCH_S at one confined process (a candidate
child, a compiler, a tool over candidate code) and, when it is past a limit, kills its process
group and every process of its uid (or, without a uid of its own, every process it can tell is
the child's, each through a pidfd) and keeps the reason in `over` for the verdict. What it counts:

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

import functools
import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelwright.judge import confine

log = logging.getLogger(__name__)

WATCH_S = 0.25
LOOK_S = 1.0  # a look that takes longer is over (a candidate that makes itself slow to count)
FAILS = 3  # looks in a row that fail, and it is over
DISK = 4 << 30  # bytes under a confined process's writable folders, in all
FILES = 100_000  # entries under them
MAX_DEPTH = 256  # folders nested deeper than this are over (no candidate needs them; a walk keeps one descriptor per level)
ENV = "KERNELWRIGHT_SANDBOX_"  # + DISK, FILES, MEMORY, MEMORY_FLOOR: bytes or a count; 0 leaves that one unwatched


def _size(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


@dataclass(frozen=True)
class Limits:
    disk: int  # bytes on disk: its writable folders, and files it holds open unlinked (0: not watched)
    files: int  # entries under its writable folders (0: not watched)
    memory: int  # host memory across its processes, anonymous and shared (0: not watched)
    floor: int = 0  # the machine's available memory under which every watched process is killed (0: not watched)


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


# ---- disk ---------------------------------------------------------------------------------------


class _Over(Exception):
    pass


def _budget(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise _Over(f"its files and processes take longer than {LOOK_S:g} s to count")


def disk_use(roots: Sequence[str | Path], *, stop_bytes: int = 0, stop_files: int = 0, deadline: float | None = None) -> tuple[int, int]:
    """(bytes on disk, entries) under `roots`, links not followed; raises _Over with the reason as
    soon as the bytes pass `stop_bytes` or the entries `stop_files` (0: no stop), a folder is
    nested deeper than MAX_DEPTH, one cannot be read, or time.monotonic() passes `deadline`. A
    root that does not exist counts nothing."""
    total = entries = 0
    seen: set[tuple[int, int]] = set()  # hard links count once

    def count(st: os.stat_result) -> None:
        nonlocal total, entries
        entries += 1
        if stop_files and entries > stop_files:
            raise _Over(f"more than {stop_files} files and folders in its writable folders")
        if entries % 256 == 0:
            _budget(deadline)
        if st.st_nlink > 1:
            if (st.st_dev, st.st_ino) in seen:
                return
            seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
        if stop_bytes and total > stop_bytes:
            raise _Over(f"more than {_size(stop_bytes)} on disk in its writable folders")

    def opendir(name: str, dir_fd: int | None) -> int | None:
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None  # gone, or replaced by a file, meanwhile
        except OSError as exc:  # it made a folder the judge cannot read: what is in it would not count
            raise _Over(f"a folder in its writable folders cannot be read ({exc.strerror})") from None

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
                sub = opendir(name, fd)
                if sub is not None:
                    try:
                        walk(sub, depth + 1)
                    finally:
                        os.close(sub)

    for root in dict.fromkeys(str(r) for r in roots):
        fd = opendir(root, None)
        if fd is not None:
            try:
                walk(fd, 1)
            finally:
                os.close(fd)
    return total, entries


@functools.lru_cache(maxsize=1)
def _shmem_dev() -> int | None:
    """The device number of the kernel's internal shmem mount, where memfds, shared anonymous
    mappings and System V segments live (a memfd of the judge's own, looked at once)."""
    try:
        fd = os.memfd_create("kw-quota-probe", os.MFD_CLOEXEC)
    except (OSError, AttributeError):
        return None
    try:
        return os.fstat(fd).st_dev
    finally:
        os.close(fd)


@dataclass
class Hidden:
    """What a look found that no folder shows, each file once."""

    disk: int = 0  # bytes of unlinked files its processes hold open or map
    shmem: int = 0  # bytes of memfds and other shmem objects (shared anonymous mappings, System V) they hold or map
    mapped: bool = False  # whether mappings were read too (then every shmem object a process maps is in `shmem`)


def hidden_files(procs: dict[int, dict[str, int]], deadline: float | None = None) -> Hidden:
    """What the processes hold open or map that no folder shows: unlinked files (disk, or a
    tmpfs) and shmem objects (memory). Mappings are read where the judge is root (their sizes
    come through /proc/PID/map_files, root's to follow): a file mapped and then closed is in no
    descriptor table. Raises _Over where a process's descriptors cannot be read (it made itself
    non-dumpable), or past `deadline`."""
    found = Hidden(mapped=os.geteuid() == 0)
    seen: set[tuple[int, int]] = set()
    shm = _shmem_dev()

    def add(path: str, memfd: bool) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            if memfd or st.st_dev == shm:
                found.shmem += st.st_blocks * 512
            else:
                found.disk += st.st_blocks * 512

    for pid, st in procs.items():
        _budget(deadline)
        base = f"/proc/{pid}/task/{st.get('Task', pid)}"
        try:
            fds = os.listdir(f"{base}/fd")
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone
        except OSError as exc:
            raise _Over(f"the descriptors of its process {pid} cannot be read ({exc.strerror})") from None
        for fd in fds:
            try:
                target = os.readlink(f"{base}/fd/{fd}")
            except OSError:
                continue
            memfd = target.startswith("/memfd:")
            if memfd or target.endswith(" (deleted)"):
                add(f"{base}/fd/{fd}", memfd)
        if not found.mapped:
            continue
        try:
            with open(f"{base}/maps", "rb") as f:
                lines = [ln for ln in f if b"/memfd:" in ln or ln.endswith(b" (deleted)\n")]
        except OSError:
            continue
        for ln in lines:  # shared or private, a mapping holds its file; mapped and closed, it is in no descriptor table
            fields = ln.split(maxsplit=5)
            if len(fields) == 6:
                add(f"/proc/{pid}/map_files/{fields[0].decode()}", fields[5].startswith(b"/memfd:"))
    return found


# ---- processes and memory -----------------------------------------------------------------------


_FIELDS = (b"State", b"Uid", b"PPid", b"NSpgid", b"NSsid", b"RssAnon", b"RssShmem")


def _status(path: str) -> dict[str, int]:
    got: dict[str, int] = {}
    try:
        with open(path, "rb") as f:
            for line in f:
                name, _, value = line.partition(b":")
                if name in _FIELDS:
                    parts = value.split()
                    if not parts:
                        continue
                    if name == b"State":
                        got["Zombie"] = int(parts[0] in (b"Z", b"X"))
                    else:
                        got[name.decode()] = int(parts[0]) * (1024 if name.startswith(b"Rss") else 1)
    except (OSError, ValueError):
        pass
    return got


def _process(pid: int) -> dict[str, int]:
    """A process's status fields; where its main thread has exited and another still runs (the
    main thread's status then shows no memory and its descriptor table reads empty), the memory
    of that thread's, and `Task` naming it."""
    st = _status(f"/proc/{pid}/status")
    if st.get("Zombie") and "RssAnon" not in st:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            tids = []
        for tid in tids:
            if int(tid) != pid:
                live = _status(f"/proc/{pid}/task/{tid}/status")
                if live and not live.get("Zombie"):
                    st.update({k: v for k, v in live.items() if k.startswith("Rss")}, Task=int(tid), Zombie=0)
                    break
    return st


def processes(pid: int, uid: int | None) -> dict[int, dict[str, int]]:
    """The processes that are the confined child `pid`'s, with their status fields: with a uid of
    its own, every process of that uid and `pid` itself; without, `pid`, its descendants, and
    whatever is in its process group or session (a daemon that left both and was handed to
    another parent is not seen: the fork server's sweep and the uid are what catch it)."""
    every: dict[int, dict[str, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _process(int(name))
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


def fair_share(pid: int, shmem: bool = True) -> int | None:
    """Pss_Anon (+ Pss_Shmem with `shmem`) of a process (/proc/PID/smaps_rollup): its share of
    each page it maps, so a page that forked processes share counts once in all; None where the
    file lacks them."""
    want = (b"Pss_Anon", b"Pss_Shmem") if shmem else (b"Pss_Anon",)
    got: dict[bytes, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                name, _, value = line.partition(b":")
                if name in want:
                    got[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return sum(got.values()) if len(got) == len(want) else None


def memory_use(procs: dict[int, dict[str, int]], limit: int = 0, shmem: bool = True) -> int:
    """Host memory across the processes: RssAnon (+ RssShmem with `shmem`) summed, and where that
    passes `limit`, the fair share (fair_share) instead, for the processes whose file has it."""

    def rss(st: dict[str, int]) -> int:
        return st.get("RssAnon", 0) + (st.get("RssShmem", 0) if shmem else 0)

    quick = sum(rss(st) for st in procs.values())
    if not limit or quick <= limit:
        return quick
    total = 0
    for pid, st in procs.items():
        share = fair_share(pid, shmem)
        total += share if share is not None else rss(st)
    return total


def memory_available() -> int | None:
    """The machine's MemAvailable in bytes, None where /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# ---- the watch ----------------------------------------------------------------------------------


def look(pid: int, roots: Sequence[str | Path], uid: int | None, lim: Limits,
         procs: dict[int, dict[str, int]] | None = None) -> tuple[str, dict[int, dict[str, int]]]:
    """One look: the reason the child is over a limit ('' when it is not), and its processes
    (`procs`, else processes(pid, uid))."""
    deadline = time.monotonic() + LOOK_S
    if procs is None:
        procs = processes(pid, uid)
    try:
        _budget(deadline)
        used = disk_use(roots, stop_bytes=lim.disk, stop_files=lim.files, deadline=deadline)[0] if (lim.disk or lim.files) else 0
        hidden = hidden_files(procs, deadline)
    except _Over as exc:
        return str(exc), procs
    if lim.disk and used + hidden.disk > lim.disk:
        return f"more than {_size(lim.disk)} on disk ({_size(used)} in its writable folders, {_size(hidden.disk)} in files it holds open or maps unlinked)", procs
    if lim.memory:
        # with its mappings read, every shmem page it maps is in an object counted whole: its
        # anonymous memory besides; without, RssShmem too (a memfd it also maps then counts twice)
        mem = memory_use(procs, max(1, lim.memory - hidden.shmem), shmem=not hidden.mapped) + hidden.shmem
        if mem > lim.memory:
            return f"more than {_size(lim.memory)} of host memory across its {len(procs)} process(es) ({_size(mem)})", procs
    if lim.floor:
        avail = memory_available()
        if avail is not None and avail < lim.floor:
            return f"the machine's available memory fell to {_size(avail)}, under the floor of {_size(lim.floor)}, while it ran", procs
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


class Watch:
    """A thread that looks at the confined process `pid` every `every_s` until stopped; when it
    is over a limit, kills it (kill()) and keeps the reason in `over`. A pidfd taken at the start
    pins the process: once it has been reaped, nothing is signalled by its pid."""

    def __init__(self, pid: int, roots: Sequence[str | Path], *, uid: int | None, lim: Limits | None = None,
                 every_s: float = WATCH_S) -> None:
        self.pid, self.roots, self.uid = pid, [str(r) for r in roots], uid
        self.limits = lim if lim is not None else limits()
        self.every_s = every_s
        self.over = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd = _pidfd(pid)
        if self.limits.disk or self.limits.files or self.limits.memory or self.limits.floor:
            self._thread = threading.Thread(target=self._run, name=f"kw-watch-{pid}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        failed = 0
        while not self._stop.wait(self.every_s):
            try:
                reason, _ = look(self.pid, self.roots, self.uid, self.limits, self.mine())
                failed = 0
            except Exception as exc:  # noqa: BLE001 - counted: FAILS in a row and it is over
                failed += 1
                log.warning("watch of %s: a look failed (%s of %s in a row): %s", self.pid, failed, FAILS, exc)
                reason = f"the judge could not look at it {FAILS} times in a row ({exc})" if failed >= FAILS else ""
            if reason and not self._stop.is_set():
                self.over = f"the sandbox killed it: {reason}"
                log.warning("child %s: %s", self.pid, self.over)
                self.kill()
                return

    def _leader_alive(self) -> bool:
        """Whether `pid` is still the process watched (not reaped: its pid and group id are not
        another's)."""
        return self._fd is not None and _signal(self._fd, 0)

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
            self._killpg()
            confine.kill_uid(self.uid)  # by the uid itself, never by a pid read from /proc
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
        """No more looks (the caller is killing or has reaped the process)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._fd is not None and (self._thread is None or not self._thread.is_alive()):
            os.close(self._fd)
            self._fd = None
