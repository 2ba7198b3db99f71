"""The build cache's size, and pruning it by last use (`kernelwright cache show|prune`).

Two kinds of entries grow without bound as candidates come and go: raw builds
(`<cache>/builds/<key>/`, runtime.build) and torch-extension folders, a Triton candidate's compile
cache among them (`<cache>/torch_extensions/<hash>/`, judge.extension). Each entry's last use is a
mark only the judge writes, never the file system's access time (noatime and relatime mounts keep
that stale) nor anything in a folder a candidate can write: a raw build's `meta.json` is touched on
every hit in a process outside the sandbox; an extension folder's mark is the file `<hash>.used`
beside it, touched whenever a verdict asks for the folder. The judge's own kernels (the input
digest, the lead spin), which only sandboxed children load after the fork server built them, are
listed in `builds/.judge-kernels` and never pruned. Nothing else under the cache (locks, the
service's socket folder) is an entry or removed.

Pruning goes least recently used first. An entry used within `min_age_s` (default an hour, read
again just before it goes) stays, so a verdict running now keeps what it reads; so does an entry
whose lock is held: a raw build's key lock (a compile, or a verdict that prebuilt it and holds it
shared until its end), an extension folder's `.use.lock` (held shared by each verdict that uses the
folder) and its Triton cache lock. An entry is renamed aside in its own folder (`.prune-*`), then deleted by a walk
that follows no link however deep the tree (`rm -rf`), and a leftover aside is swept by the next
prune. Sizes are blocks on disk, each inode once, by a walk without recursion (a folder whose path
grows past the system's limit is not counted): a candidate's sparse or hard-linked files do not
inflate its folder, nor its deep tree crash the command.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernelwright.runtime.build import META_NAME, cache_dir

KINDS = ("builds", "torch_extensions")
MIN_AGE_S = 3600.0
JUDGE_KERNELS = ".judge-kernels"  # in builds/: the keys of the judge's own kernels, one per line
ASIDE = ".prune-"


@dataclass(frozen=True)
class Entry:
    """One removable entry of the cache."""

    kind: str  # "builds" or "torch_extensions"
    path: Path
    bytes: int
    used: float  # seconds since the epoch: the judge's last mark of use

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.bytes, "used": round(self.used, 3)}


def note_judge_kernels(keys: list[str]) -> None:
    """Record the cache keys of the judge's own kernels (judge.forkserver), which a prune keeps."""
    builds = cache_dir() / "builds"
    with contextlib.suppress(OSError):
        known = set(_judge_keys(builds))
        if not set(keys) <= known:
            builds.mkdir(parents=True, exist_ok=True)
            tmp = builds / f"{JUDGE_KERNELS}.{secrets.token_hex(4)}"
            tmp.write_text("".join(f"{k}\n" for k in sorted(known | set(keys))))
            os.replace(tmp, builds / JUDGE_KERNELS)


def _judge_keys(builds: Path) -> list[str]:
    try:
        return [line.strip() for line in (builds / JUDGE_KERNELS).read_text().splitlines() if line.strip()]
    except OSError:
        return []


def in_use(lock: Path) -> int | None:
    """A shared lock on `lock` (a raw build's key lock, an extension folder's `.use.lock`), held by a
    verdict while it uses the entry: a prune then passes it by. None, without waiting, where a prune
    holds it now (the verdict goes on; what it misses is built again)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def build_lock(lib_path: Path) -> Path:
    """The key lock of the raw build whose library is `lib_path` (runtime.build's `.locks/<key>.lock`)."""
    return lib_path.parent.parent / ".locks" / f"{lib_path.parent.name}.lock"


def extension_lock(folder: Path) -> Path:
    """The lock a verdict holds shared on an extension folder it uses."""
    return folder.parent / f"{folder.name}.use.lock"


def mark_extension(folder: Path) -> None:
    """Touch an extension folder's mark of use (beside it, where no candidate writes)."""
    mark = folder.parent / f"{folder.name}.used"
    with contextlib.suppress(OSError):
        mark.touch()
        os.utime(mark)


def _walk(top: Path, each: Callable[[os.DirEntry[str]], None]) -> None:
    """Call `each` on everything below `top`, files before their folders are left, without
    recursion (a candidate's tree may be thousands of folders deep) and never through a link."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as items:
                for item in items:
                    if item.is_dir(follow_symlinks=False):
                        stack.append(Path(item.path))
                    each(item)
        except OSError:
            continue


def _size(path: Path) -> int:
    """Blocks on disk below `path`, each inode once, links not followed."""
    seen: set[tuple[int, int]] = set()
    total = 0

    def add(item: os.DirEntry[str]) -> None:
        nonlocal total
        with contextlib.suppress(OSError):
            st = item.stat(follow_symlinks=False)
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512

    _walk(path, add)
    return total


def _remove(path: Path) -> bool:
    """Delete a folder set aside, links inside it never followed, however deep (coreutils' rm walks
    by descriptor); whether it is gone."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, timeout=3600, check=False)
    return not os.path.lexists(path)


def _used(kind: str, path: Path) -> float:
    mark = path / META_NAME if kind == "builds" else path.parent / f"{path.name}.used"
    try:
        return os.stat(mark, follow_symlinks=False).st_mtime
    except OSError:  # never marked (made before marks were kept): its folder's own time
        try:
            return os.stat(path, follow_symlinks=False).st_mtime
        except OSError:
            return 0.0


def entries(root: Path | None = None) -> list[Entry]:
    """The cache's removable entries, least recently used first (the judge's own kernels are not)."""
    root = cache_dir() if root is None else root
    keep = set(_judge_keys(root / "builds"))
    found = []
    for kind in KINDS:
        base = root / kind
        try:
            listed = sorted(base.iterdir())
        except OSError:
            continue
        for path in listed:
            if path.name.startswith((".", "tmp-")) or path.name in keep or path.is_symlink() or not path.is_dir():
                continue  # locks, marks, half-published builds, what a prune set aside, the judge's kernels
            found.append(Entry(kind, path, _size(path), _used(kind, path)))
    return sorted(found, key=lambda e: (e.used, str(e.path)))


def usage(root: Path | None = None) -> dict[str, object]:
    """The cache's folder, and per kind how many entries and bytes; `other`: everything else under it."""
    root = cache_dir() if root is None else root
    listed = entries(root)
    total = _size(root) if root.is_dir() else 0
    kinds = {k: {"entries": sum(1 for e in listed if e.kind == k), "bytes": sum(e.bytes for e in listed if e.kind == k)} for k in KINDS}
    return {"root": str(root), "kinds": kinds, "other_bytes": max(0, total - sum(e.bytes for e in listed)), "total_bytes": total}


@contextlib.contextmanager
def _held(entry: Entry) -> Iterator[bool]:
    """Whether every lock on the entry could be taken (then held for the block): a raw build's key
    lock (a compile, or a verdict's shared hold), an extension folder's Triton cache lock and its
    `.use.lock` (verdicts' shared holds). A lock file that is not there holds nothing."""
    locks = ([entry.path.parent / ".locks" / f"{entry.path.name}.lock"] if entry.kind == "builds"
             else [entry.path.parent / f"{entry.path.name}.triton.lock", extension_lock(entry.path)])
    fds = []
    try:
        for lock in locks:
            try:
                fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
        yield True
    finally:
        for fd in fds:
            os.close(fd)


@dataclass
class Pruned:
    """What a prune removed (or, dry, would remove), kept for a recent use or a held lock, and could
    not remove; the bytes freed, and what the entries hold after it."""

    removed: list[Entry] = field(default_factory=list)
    busy: list[Entry] = field(default_factory=list)
    failed: list[tuple[Entry, str]] = field(default_factory=list)
    freed: int = 0
    kept_bytes: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"removed": [e.to_dict() for e in self.removed], "busy": [e.to_dict() for e in self.busy],
                "failed": [{**e.to_dict(), "why": why} for e, why in self.failed], "freed_bytes": self.freed, "kept_bytes": self.kept_bytes}


def check_bounds(keep_bytes: float | None, older_than_s: float | None, min_age_s: float) -> None:
    """ValueError when neither bound is given, or for a negative or non-finite one."""
    if keep_bytes is None and older_than_s is None:
        raise ValueError("give a bound: the bytes to keep, an age, or both")
    for name, value in (("keep", keep_bytes), ("older than", older_than_s), ("minimum age", min_age_s)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"the {name} bound must be a finite number, not negative: got {value}")


def prune(root: Path | None = None, *, keep_bytes: int | None = None, older_than_s: float | None = None,
          min_age_s: float = MIN_AGE_S, dry_run: bool = False, now: Callable[[], float] = time.time,
          progress: Callable[[int, int], None] | None = None) -> Pruned:
    """Remove entries, least recently used first: every one unused for `older_than_s`, then more
    until the entries hold at most `keep_bytes`; never one used within `min_age_s` (its mark read
    again just before it goes) or whose lock is held. `progress(done, total)` after each entry looked
    at. ValueError for bounds check_bounds refuses."""
    check_bounds(keep_bytes, older_than_s, min_age_s)
    root = cache_dir() if root is None else root
    if not dry_run:
        for kind in KINDS:  # what an earlier prune set aside and could not delete
            with contextlib.suppress(OSError):
                for left in (root / kind).glob(f"{ASIDE}*"):
                    _remove(left)
    listed = entries(root)
    total = sum(e.bytes for e in listed)
    done = Pruned()
    for i, entry in enumerate(listed):
        if progress is not None:
            progress(i, len(listed))
        old = older_than_s is not None and now() - entry.used >= older_than_s
        over = keep_bytes is not None and total > keep_bytes
        if not (old or over):
            break  # least recently used first: nothing later is older, and the size stays within its bound
        with _held(entry) as free:
            if not free or now() - _used(entry.kind, entry.path) < min_age_s:  # read again: a verdict may have marked it since
                done.busy.append(entry)
                continue
            if not dry_run:
                aside = entry.path.parent / f"{ASIDE}{entry.path.name}-{secrets.token_hex(4)}"
                try:
                    os.rename(entry.path, aside)
                except FileNotFoundError:
                    total -= entry.bytes  # gone meanwhile
                    continue
                except OSError as exc:
                    done.failed.append((entry, f"{type(exc).__name__}: {exc}"))
                    continue
                if not _remove(aside):
                    done.failed.append((entry, f"set aside as {aside.name}, not all of it could be deleted (the next prune tries again)"))
                    continue
        done.removed.append(entry)
        total -= entry.bytes
    if progress is not None:
        progress(len(listed), len(listed))
    done.freed = sum(e.bytes for e in done.removed)
    done.kept_bytes = total
    return done
