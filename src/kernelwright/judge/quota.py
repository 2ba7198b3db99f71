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
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
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


def _meminfo(field: str) -> int | None:
    """One field of /proc/meminfo in bytes, None where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_total() -> int:
    """The machine's memory in bytes, 0 where /proc/meminfo cannot be read."""
    return _meminfo("MemTotal") or 0


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


@functools.lru_cache(maxsize=1)
def maps_readable() -> bool:
    """Whether this process may follow /proc/PID/map_files (CAP_SYS_ADMIN or
    CAP_CHECKPOINT_RESTORE in the first user namespace: root with its capabilities, not root in
    a container that dropped them): tried once on one of its own mappings."""
    try:
        with open("/proc/self/maps", "rb") as f:
            first = f.readline().split()[0].decode()
        os.stat(f"/proc/self/map_files/{first}")
        return True
    except (OSError, IndexError):
        return False


@dataclass
class Hidden:
    """What a look found that no folder shows, each file once."""

    disk: int = 0  # bytes of unlinked files its processes hold open or map (in its folders' filesystems)
    shmem: int = 0  # bytes of memfds and other shmem objects (shared anonymous mappings, System V) they hold or map
    mapped: set[int] = field(default_factory=set)  # processes whose mappings were all read: their shmem pages are in `shmem`


def hidden_files(procs: dict[int, dict[str, int]], deadline: float | None = None, *, devices: frozenset[int] | None = None,
                 uid: int | None = None, read_before: set[int] | None = None) -> Hidden:
    """What the processes hold open or map that no folder shows: unlinked files (disk, or a
    tmpfs: only those on `devices`, its folders' filesystems, and with a uid of its own only its
    uid's, so that a library deleted under a warm fork server is not the candidate's) and shmem
    objects (memory). Mappings are read where the judge may follow /proc/PID/map_files
    (maps_readable): a file mapped and then closed is in no descriptor table. A process whose
    descriptors or mappings cannot be read is left out of `mapped` (its RssShmem counts instead),
    unless it was read before (`read_before`, which this fills): then it made itself unreadable
    (non-dumpable) and that is over (_Over). Past `deadline`, _Over too."""
    found = Hidden()
    seen: set[tuple[int, int]] = set()
    shm = _shmem_dev()
    follow = maps_readable()

    def add(path: str, memfd: bool) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
            return
        seen.add((st.st_dev, st.st_ino))
        if memfd or st.st_dev == shm:
            found.shmem += st.st_blocks * 512
        elif (devices is None or st.st_dev in devices) and (uid is None or st.st_uid == uid):
            found.disk += st.st_blocks * 512

    def unreadable(pid: int, what: str, exc: OSError) -> None:
        if read_before is not None and pid in read_before:
            raise _Over(f"the {what} of its process {pid} could be read and now cannot ({exc.strerror})")

    for pid, st in procs.items():
        _budget(deadline)
        if st.get("Zombie") and "Task" not in st:
            continue  # exited, not yet reaped: it holds nothing (and its /proc is its parent's only)
        base = f"/proc/{pid}/task/{st.get('Task', pid)}"
        try:
            fds = os.listdir(f"{base}/fd")
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone
        except OSError as exc:
            unreadable(pid, "descriptors", exc)
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{base}/fd/{fd}")
            except OSError:
                continue
            memfd = target.startswith("/memfd:")
            if memfd or target.endswith(" (deleted)"):
                add(f"{base}/fd/{fd}", memfd)
        if read_before is not None:
            read_before.add(pid)
        if not follow:
            continue
        try:
            with open(f"{base}/maps", "rb") as f:
                lines = [ln for ln in f if b"/memfd:" in ln or ln.endswith(b" (deleted)\n")]
        except (FileNotFoundError, ProcessLookupError):
            continue
        except OSError as exc:
            unreadable(pid, "mappings", exc)
            continue
        complete = True
        for ln in lines:  # shared or private, a mapping holds its file; mapped and closed, it is in no descriptor table
            fields = ln.split(maxsplit=5)
            if len(fields) != 6:
                continue
            path = f"/proc/{st.get('Task', pid)}/map_files/{fields[0].decode()}"  # a live thread's, where the main one exited
            if not os.path.exists(path):
                complete = False
                continue
            add(path, fields[5].startswith(b"/memfd:"))
        if complete:
            found.mapped.add(pid)
    return found


# ---- processes and memory -----------------------------------------------------------------------


_FIELDS = (b"State", b"Uid", b"PPid", b"NSpgid", b"NSsid", b"RssAnon", b"RssShmem", b"VmPTE", b"VmSwap")


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
                        got[name.decode()] = int(parts[0]) * (1024 if name.startswith((b"Rss", b"Vm")) else 1)
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
                    st.update({k: v for k, v in live.items() if k.startswith(("Rss", "Vm"))}, Task=int(tid), Zombie=0)
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
    """Pss_Anon (+ Pss_Shmem with `shmem`) of a process (/proc/PID/smaps_rollup; PID may be a
    live thread's): its share of each page it maps, so a page that forked processes share counts
    once in all; None where the file lacks them."""
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


def memory_use(procs: dict[int, dict[str, int]], limit: int = 0, mapped: Collection[int] = ()) -> int:
    """Host memory across the processes: RssAnon, page tables (VmPTE) and swap (VmSwap) of each,
    plus RssShmem for those not in `mapped` (whose shmem objects were counted whole elsewhere);
    where that sum passes `limit`, the fair share (fair_share) in place of the RSS, for the
    processes whose file has it."""

    def rss(pid: int, st: dict[str, int]) -> int:
        return st.get("RssAnon", 0) + (0 if pid in mapped else st.get("RssShmem", 0))

    def kernel(st: dict[str, int]) -> int:
        return st.get("VmPTE", 0) + st.get("VmSwap", 0)

    quick = sum(rss(p, st) + kernel(st) for p, st in procs.items())
    if not limit or quick <= limit:
        return quick
    total = 0
    for pid, st in procs.items():
        share = fair_share(st.get("Task", pid), shmem=pid not in mapped)
        total += (share if share is not None else rss(pid, st)) + kernel(st)
    return total


def memory_available() -> int | None:
    """The machine's MemAvailable in bytes, None where /proc/meminfo does not say."""
    return _meminfo("MemAvailable")


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
        _budget(deadline)
        used = disk_use(roots, stop_bytes=lim.disk, stop_files=lim.files, deadline=deadline)[0] if (lim.disk or lim.files) else 0
        hidden = hidden_files(procs, deadline, devices=_devices(roots), uid=uid, read_before=read_before)
    except _Over as exc:
        return str(exc), procs
    if lim.disk and used + hidden.disk > lim.disk:
        return f"more than {_size(lim.disk)} on disk ({_size(used)} in its writable folders, {_size(hidden.disk)} in files it holds open or maps unlinked)", procs
    if lim.memory:
        # a process whose mappings were all read has every shmem page it maps in an object
        # counted whole: its anonymous memory besides; any other, its RssShmem too (a memfd it
        # also holds then counts twice: the bound errs low)
        mem = memory_use(procs, max(1, lim.memory - hidden.shmem), hidden.mapped) + hidden.shmem
        if mem > lim.memory:
            return f"more than {_size(lim.memory)} of host memory across its {len(procs)} process(es) ({_size(mem)})", procs
    if lim.floor:
        avail = memory_available()
        if avail is not None and avail < lim.floor:
            return f"{MACHINE} to {_size(avail)}, under the floor of {_size(lim.floor)}, while it ran", procs
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
                 every_s: float = WATCH_S) -> None:
        self.pid, self.roots, self.uid = pid, [str(r) for r in roots], uid
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
        """No more looks (the caller is killing or has reaped the process). The pidfd is closed by
        the thread as it ends (never under a kill it is making)."""
        self._stop.set()
        if self._thread is None:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        elif self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
