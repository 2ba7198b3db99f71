"""What a confined process uses of the machine, counted where no rlimit reaches (judge.quota
watches it against its limits): the disk under its writable folders (disk_use), what its
processes hold open or map that no folder shows (hidden_files: unlinked files, memfds and other
shmem objects), its processes (processes) and their host memory (memory_use, fair_share), read
from /proc. A count that would take too long, or that the candidate has made unreadable, raises
Over with the reason."""

from __future__ import annotations

import functools
import os
import stat
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOOK_S = 1.0  # a look that takes longer is over (a candidate that makes itself slow to count)
MAX_DEPTH = 256  # folders nested deeper than this are over (no candidate needs them; a walk keeps one descriptor per level)


def size_text(n: int) -> str:
    """Bytes as a reason says them: GiB with two decimals from 1 GiB, MiB below."""
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


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


# ---- disk ---------------------------------------------------------------------------------------


class Over(Exception):
    """A count that found the process over a limit, or could not finish: the reason."""


def budget(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise Over(f"its files and processes take longer than {LOOK_S:g} s to count")


def disk_use(roots: Sequence[str | Path], *, stop_bytes: int = 0, stop_files: int = 0, deadline: float | None = None) -> tuple[int, int]:
    """(bytes on disk, entries) under `roots`, links not followed; raises Over with the reason as
    soon as the bytes pass `stop_bytes` or the entries `stop_files` (0: no stop), a folder is
    nested deeper than MAX_DEPTH, one cannot be read, or time.monotonic() passes `deadline`. A
    root that does not exist counts nothing."""
    total = entries = 0
    seen: set[tuple[int, int]] = set()  # hard links count once

    def count(st: os.stat_result) -> None:
        nonlocal total, entries
        entries += 1
        if stop_files and entries > stop_files:
            raise Over(f"more than {stop_files} files and folders in its writable folders")
        if entries % 256 == 0:
            budget(deadline)
        if st.st_nlink > 1:
            if (st.st_dev, st.st_ino) in seen:
                return
            seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
        if stop_bytes and total > stop_bytes:
            raise Over(f"more than {size_text(stop_bytes)} on disk in its writable folders")

    def opendir(name: str, dir_fd: int | None) -> int | None:
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None  # gone, or replaced by a file, meanwhile
        except OSError as exc:  # it made a folder the judge cannot read: what is in it would not count
            raise Over(f"a folder in its writable folders cannot be read ({exc.strerror})") from None

    def walk(fd: int, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Over(f"folders nested more than {MAX_DEPTH} deep in its writable folders")
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
    (non-dumpable) and that is over (Over). Past `deadline`, Over too."""
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
            raise Over(f"the {what} of its process {pid} could be read and now cannot ({exc.strerror})")

    for pid, st in procs.items():
        budget(deadline)
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
