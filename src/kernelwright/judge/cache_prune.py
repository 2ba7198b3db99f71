"""The build cache's size, and pruning it by last use (`kernelwright cache show|prune`).

Two kinds of entries grow without bound as candidates come and go: raw builds
(`<cache>/builds/<key>/`, runtime.build) and torch-extension folders, a Triton candidate's compile
cache among them (`<cache>/torch_extensions/<hash>/`, judge.extension). Each entry's last use is
the judge's own mark, never the file system's access time (which noatime and relatime mounts keep
stale): a raw build's `meta.json` is touched on every hit in a process outside the sandbox, an
extension folder whenever a verdict asks for it. Nothing else under the cache (locks, the
service's socket folder) is counted as an entry or removed.

Pruning goes least recently used first. An entry used within `min_age_s` (default an hour) is
never removed, so a verdict running now keeps what it reads; neither is an entry whose lock is held
(a raw build's key lock while it compiles; a Triton candidate's cache lock while its verdict runs).
An entry leaves whole: renamed aside in its own folder first (a reader finds it complete or absent,
and an absent one is built again), then deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kernelwright.runtime.build import META_NAME, cache_dir

KINDS = ("builds", "torch_extensions")
MIN_AGE_S = 3600.0


@dataclass(frozen=True)
class Entry:
    """One removable entry of the cache."""

    kind: str  # "builds" or "torch_extensions"
    path: Path
    bytes: int
    used: float  # seconds since the epoch: the judge's last mark of use

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.bytes, "used": round(self.used, 3)}


def _size(path: Path) -> int:
    total = 0
    for folder, dirs, files in os.walk(path):  # links not followed
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size  # what the files hold, as `du --apparent-size`
    return total


def _used(kind: str, path: Path) -> float:
    target = path / META_NAME if kind == "builds" and (path / META_NAME).is_file() else path
    try:
        return os.stat(target, follow_symlinks=False).st_mtime
    except OSError:
        return 0.0


def entries(root: Path | None = None) -> list[Entry]:
    """The cache's removable entries, least recently used first."""
    root = cache_dir() if root is None else root
    found = []
    for kind in KINDS:
        base = root / kind
        if not base.is_dir():
            continue
        for path in base.iterdir():
            if path.name.startswith((".", "tmp-")) or path.is_symlink() or not path.is_dir():
                continue  # locks, half-published builds, and what a prune set aside
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
    """Whether the entry's lock could be taken (then held for the block): a raw build's key lock,
    a Triton candidate's cache lock; an entry without one is free."""
    lock = (entry.path.parent / ".locks" / f"{entry.path.name}.lock" if entry.kind == "builds"
            else entry.path.parent / f"{entry.path.name}.triton.lock")
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


@dataclass
class Pruned:
    """What a prune removed (or, dry, would remove), what it kept for being in use, and the bytes freed."""

    removed: list[Entry]
    busy: list[Entry]
    freed: int
    kept_bytes: int  # the entries' bytes after the prune

    def to_dict(self) -> dict[str, object]:
        return {"removed": [e.to_dict() for e in self.removed], "busy": [e.to_dict() for e in self.busy], "freed_bytes": self.freed,
                "kept_bytes": self.kept_bytes}


def prune(root: Path | None = None, *, keep_bytes: int | None = None, older_than_s: float | None = None,
          min_age_s: float = MIN_AGE_S, dry_run: bool = False, now: float | None = None) -> Pruned:
    """Remove entries, least recently used first: every one unused for `older_than_s`, then more
    until the entries hold at most `keep_bytes`; never one used within `min_age_s` or whose lock is
    held. ValueError when neither bound is given, or for a negative one."""
    if keep_bytes is None and older_than_s is None:
        raise ValueError("give a bound: the bytes to keep, an age, or both")
    for name, value in (("keep_bytes", keep_bytes), ("older_than_s", older_than_s), ("min_age_s", min_age_s)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    now = time.time() if now is None else now
    listed = entries(root)
    total = sum(e.bytes for e in listed)
    removed: list[Entry] = []
    busy: list[Entry] = []
    for entry in listed:
        old = older_than_s is not None and now - entry.used >= older_than_s
        over = keep_bytes is not None and total > keep_bytes
        if not (old or over):
            break  # least recently used first: nothing later is older, and the size stays within its bound
        if now - entry.used < min_age_s:
            busy.append(entry)
            continue
        with _held(entry) as free:
            if not free:
                busy.append(entry)
                continue
            if not dry_run:
                aside = entry.path.parent / f".prune-{entry.path.name}-{secrets.token_hex(4)}"
                try:
                    os.rename(entry.path, aside)
                except FileNotFoundError:
                    continue  # gone meanwhile
                shutil.rmtree(aside, ignore_errors=True)
        removed.append(entry)
        total -= entry.bytes
    return Pruned(removed, busy, sum(e.bytes for e in removed), total)
