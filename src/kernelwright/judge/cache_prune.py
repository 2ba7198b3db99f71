"""The build cache's size, and pruning it by last use (`kernelwright cache show|prune`).

Two kinds of entries grow without bound as candidates come and go: raw builds
(`<cache>/builds/<key>/`, runtime.build) and torch-extension folders, a Triton candidate's compile
cache among them (`<cache>/torch_extensions/<hash>/`, judge.extension). Each entry's last use is a
mark only the judge writes, never the file system's access time (noatime and relatime mounts keep
that stale) nor anything in a folder a candidate can write: a raw build's `meta.json` is touched on
every hit in a process outside the sandbox; an extension folder's mark is the file `<hash>.used`
beside it, touched whenever a verdict asks for the folder; an entry never marked counts as unused.
The judge's own kernels (the input digest, the lead spin), which only sandboxed children load after
the fork server built them, are listed in `builds/.judge-kernels` and never pruned. Nothing else
under the cache (locks, marks, the service's socket folder) is an entry.

Pruning goes least recently used first. An entry stays when it was used within `min_age_s`
(default an hour; the mark read again just before it goes) or when one of its locks is held: a raw
build's key lock (a compile) or its use lock `.locks/<key>.use`, an extension folder's
`<hash>.use.lock` (each held shared by a verdict that uses the entry, to its end) or its Triton
cache lock. Under its locks an entry is only renamed aside in its own folder (`.prune-*`: a reader
finds it complete or absent; a verdict waits for a use lock at most HOLD_WAIT_S, then goes on); its
lock files, made first where missing (only for an entry that goes), are unlinked while still held
(a verdict checks, once it holds its use lock or the Triton lock, that the file is still the one at
the path; a compile does not: a key lock on an unlinked file costs at most a second compile), the
locks go, and then coreutils' chmod and rm delete it by descriptor, following no link however deep
the tree. Lock files and marks an entry left before (a failed build's, an older prune's), the
newest made or touched at least `min_age_s` ago, are swept under the entry's lock files that are
there. What could not be deleted is reported and swept by the next prune. Sizes are blocks on
disk, each inode once (`du`): a candidate's sparse or hard-linked files do not inflate its folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernelwright.runtime.build import META_NAME, cache_dir, flock_within

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
        builds.mkdir(parents=True, exist_ok=True)
        fd = os.open(builds / f"{JUDGE_KERNELS}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if not flock_within(fd, fcntl.LOCK_EX, HOLD_WAIT_S):  # fork servers of other hosts or arches sharing the cache add theirs
                return
            known = set(_judge_keys(builds))
            if not set(keys) <= known:
                tmp = builds / f"{JUDGE_KERNELS}.{secrets.token_hex(4)}"
                try:
                    tmp.write_text("".join(f"{k}\n" for k in sorted(known | set(keys))))
                    os.replace(tmp, builds / JUDGE_KERNELS)
                finally:
                    tmp.unlink(missing_ok=True)
        finally:
            os.close(fd)


def _judge_keys(builds: Path) -> list[str]:
    try:
        fd = os.open(builds / JUDGE_KERNELS, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # never a FIFO's wait
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return []
        text = f.read(1 << 20).decode(errors="replace")
    return [line.strip() for line in text.splitlines() if line.strip()]


HOLD_WAIT_S = 5.0  # the longest a verdict waits for a use lock, and a fork server for the judge-kernels list


def in_use(lock: Path) -> int | None:
    """A shared lock on `lock` (a raw build's or an extension folder's use lock), held by a verdict
    while it uses the entry: a prune then passes it by. A prune holds it exclusively only while it
    renames the entry aside; after HOLD_WAIT_S without it (someone else holds it), None, and the
    verdict goes on without the hold (what a prune takes meanwhile is built again)."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return hold(lock, fcntl.LOCK_SH, HOLD_WAIT_S, tries=3)


def hold(lock: Path, how: int, wait_s: float, *, tries: int) -> int | None:
    """A descriptor of `lock` (made if missing, 0600) with flock `how` on it, waited for at most
    `wait_s` a try; None when it could not be opened or locked. A lock file a prune unlinked between
    the open and the lock guards nothing: taken again on the new one, `tries` times in all."""
    for _ in range(tries):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        if not flock_within(fd, how, wait_s):
            os.close(fd)
            return None
        if same_file(fd, lock):
            return fd
        os.close(fd)
    return None


def same_file(fd: int, path: Path) -> bool:
    """Whether `fd` is still the file at `path`: a prune unlinks an entry's lock files while it holds
    them, and a lock taken afterwards on a descriptor opened before guards nothing."""
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def build_lock(lib_path: Path) -> Path:
    """The use lock of the raw build whose library is `lib_path` (beside runtime.build's key lock,
    which only compiles take: a verdict's hold never delays a compile)."""
    return lib_path.parent.parent / ".locks" / f"{lib_path.parent.name}.use"


def extension_lock(folder: Path) -> Path:
    """The lock a verdict holds shared on an extension folder it uses."""
    return folder.parent / f"{folder.name}.use.lock"


def mark_extension(folder: Path) -> None:
    """Touch an extension folder's mark of use (beside it, where no candidate writes)."""
    mark = folder.parent / f"{folder.name}.used"
    with contextlib.suppress(OSError):
        mark.touch()  # made, or its times set to now


def _sizes(paths: list[Path]) -> dict[Path, int]:
    """Blocks on disk below each path, links not followed, at any depth, each inode once across
    them all (coreutils' du, a few hundred paths a run); a path du could not read counts 0."""
    if shutil.which("du") is None:
        raise OSError("the cache is sized with coreutils' du, and there is none on PATH")
    found: dict[Path, int] = {}
    for start in range(0, len(paths), 500):
        chunk = paths[start:start + 500]
        done = subprocess.run(["du", "-s", "-B1", "-x", "-0", "--", *map(str, chunk)], capture_output=True, text=True, timeout=3600,
                              check=False)
        for record in done.stdout.split("\0"):
            size, _, name = record.partition("\t")
            if name and size.isdigit():
                found[Path(name)] = int(size)
    return {path: found.get(path, 0) for path in paths}


def _remove(path: Path) -> str:
    """Delete a folder set aside, links inside it never followed, however deep (coreutils' chmod
    and rm walk by descriptor; a candidate's 0500 folder is made writable first); '' once it is
    gone, else why not."""
    said = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], capture_output=True, timeout=3600, check=False)
    try:
        done = subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, text=True, timeout=3600, check=False)
        said = done.stderr.strip()[-300:]
    except (OSError, subprocess.SubprocessError) as exc:
        said = f"{type(exc).__name__}: {exc}"
    return "" if not os.path.lexists(path) else f"set aside as {path.name}, not all deleted ({said or 'no reason given'}); the next prune tries again"


def _used(kind: str, path: Path) -> float:
    """The judge's last mark of use; 0 for an entry never marked (a candidate owns its extension
    folder, and its folder's own times are the candidate's to set)."""
    mark = path / META_NAME if kind == "builds" else path.parent / f"{path.name}.used"
    try:
        return os.stat(mark, follow_symlinks=False).st_mtime
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
            found.append((kind, path))
    sizes = _sizes([path for _, path in found])
    return sorted((Entry(kind, path, sizes[path], _used(kind, path)) for kind, path in found), key=lambda e: (e.used, str(e.path)))


def usage(root: Path | None = None) -> dict[str, object]:
    """The cache's folder, and per kind how many entries and bytes; `other`: everything else under it."""
    root = cache_dir() if root is None else root
    listed = entries(root)
    total = _sizes([root])[root] if root.is_dir() else 0
    kinds = {k: {"entries": sum(1 for e in listed if e.kind == k), "bytes": sum(e.bytes for e in listed if e.kind == k)} for k in KINDS}
    return {"root": str(root), "kinds": kinds, "other_bytes": max(0, total - sum(e.bytes for e in listed)), "total_bytes": total}


def _locks(kind: str, path: Path) -> list[Path]:
    """An entry's lock files: a raw build's key lock and use lock; an extension folder's Triton cache
    lock and use lock."""
    if kind == "builds":
        return [path.parent / ".locks" / f"{path.name}.lock", build_lock(path / "lib.so")]
    return [path.parent / f"{path.name}.triton.lock", extension_lock(path)]


def _sweep_locks(root: Path, min_age_s: float, now: float) -> None:
    """Lock files and marks whose entry is gone (an earlier prune's, a failed build's), the newest
    made or touched at least `min_age_s` ago: unlinked while the prune holds the entry's lock files
    that are there, never while another process holds one. A mark is read again just before it goes
    (a verdict that made the folder and marked it meanwhile keeps it)."""
    found: dict[tuple[str, Path], list[Path]] = {}  # (kind, entry) -> its files
    with contextlib.suppress(OSError):
        for f in (root / "builds" / ".locks").iterdir():
            if f.suffix in (".lock", ".use"):
                found.setdefault(("builds", root / "builds" / f.stem), []).append(f)
    with contextlib.suppress(OSError):
        for f in (root / "torch_extensions").iterdir():
            for suffix in (".triton.lock", ".use.lock", ".used"):
                if f.name.endswith(suffix) and not f.name.startswith("."):
                    found.setdefault(("torch_extensions", f.with_name(f.name[: -len(suffix)])), []).append(f)
    for (kind, path), files in found.items():
        try:
            if os.path.lexists(path) or now - max(os.stat(f, follow_symlinks=False).st_mtime for f in files) < min_age_s:
                continue
        except OSError:
            continue
        with _held(Entry(kind, path, 0, 0.0)) as (why, held):
            if why or os.path.lexists(path):  # held by another, or made meanwhile
                continue
            mark = path.parent / f"{path.name}.used"
            with contextlib.suppress(OSError):
                if kind == "torch_extensions" and time.time() - os.stat(mark, follow_symlinks=False).st_mtime >= min_age_s:
                    mark.unlink()
                    if os.path.lexists(path):  # a verdict made the folder and marked it meanwhile: its mark again
                        mark.touch()
            _unlink_held(held)


def _unlink_held(held: list[tuple[Path, int]]) -> None:
    """Unlink lock files this process holds, each only while it is still the file at its path."""
    for lock, fd in held:
        if same_file(fd, lock):
            with contextlib.suppress(OSError):
                lock.unlink()


def _take(lock: Path, create: bool, held: list[tuple[Path, int]]) -> str:
    """Open `lock` read-only (flock needs no more; made if missing when `create`) and flock it
    exclusively without waiting: '' when taken (the descriptor added to `held`; only a file this
    process holds is ever in it), `busy` when another holds it (or it was unlinked meanwhile),
    `missing`, else why not."""
    try:
        fd = os.open(lock, os.O_RDONLY | (os.O_CREAT if create else 0) | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"its lock {lock.name}: {type(exc).__name__}: {exc}"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        why = "" if same_file(fd, lock) else "busy"  # unlinked since the open: another prune's; this one passes it by
    except BlockingIOError:
        why = "busy"
    except OSError as exc:
        why = f"its lock {lock.name}: {type(exc).__name__}: {exc}"
    if why:
        os.close(fd)
    else:
        held.append((lock, fd))
    return why


@contextlib.contextmanager
def _held(entry: Entry) -> Iterator[tuple[str, list[tuple[Path, int]]]]:
    """Every lock file of the entry that is there, taken without waiting (then held for the block):
    ('', the (path, descriptor) of each) when all were, `busy` when one is held, else why not. A raw
    build's key lock (a compile) and use lock (verdicts' shared holds); an extension folder's Triton
    cache lock and use lock. A caller about to remove the entry takes the missing ones too
    (`_take_missing`), into the same list, closed with the rest."""
    held: list[tuple[Path, int]] = []
    why = ""
    try:
        for lock in _locks(entry.kind, entry.path):
            got = _take(lock, False, held)
            if got and got != "missing":
                why = got
                break
        yield why, held
    finally:
        for _, fd in held:
            os.close(fd)


def _take_missing(entry: Entry, held: list[tuple[Path, int]]) -> tuple[str, list[Path]]:
    """Make and take the entry's lock files that `_held` found missing, just before it goes, so a
    verdict that comes meanwhile waits for them rather than holding a file about to be unlinked:
    (why not, as `_take` says it; the files made). Made only for an entry that goes: nothing is left
    for one that stays."""
    have = {lock for lock, _ in held}
    made = []
    for lock in _locks(entry.kind, entry.path):
        if lock in have:
            continue
        with contextlib.suppress(OSError):
            lock.parent.mkdir(exist_ok=True)  # `.locks` where a copied cache lacks it: a verdict would make it too
        existed = os.path.lexists(lock)
        why = _take(lock, True, held)
        if not existed:
            made.append(lock)
        if why:
            return why, made
    return "", made


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
    done = Pruned()
    if not dry_run:
        if shutil.which("rm") is None:
            raise OSError("the cache is pruned with coreutils' rm, and there is none on PATH")
        _sweep_locks(root, min_age_s, time.time())  # the files' own times: the real clock
        for kind in KINDS:  # what an earlier prune set aside and could not delete
            with contextlib.suppress(OSError):
                for left in sorted((root / kind).glob(f"{ASIDE}*")):
                    why = _remove(left)
                    if why:
                        done.failed.append((Entry(kind, left, 0, 0.0), why))
    listed = entries(root)
    total = sum(e.bytes for e in listed)
    for i, entry in enumerate(listed):
        if progress is not None:
            progress(i, len(listed))
        old = older_than_s is not None and now() - entry.used >= older_than_s
        over = keep_bytes is not None and total > keep_bytes
        if not (old or over):
            break  # least recently used first: nothing later is older, and the size stays within its bound
        aside = entry.path.parent / f"{ASIDE}{entry.path.name}-{secrets.token_hex(4)}"
        with _held(entry) as (why, held):
            if why == "busy" or (not why and now() - _used(entry.kind, entry.path) < min_age_s):  # read again: marked since?
                done.busy.append(entry)
                continue
            if why:
                done.failed.append((entry, why))
                continue
            if not dry_run:  # renamed under its locks: once aside, nothing finds it by name, and the locks go before the deletion
                why, made = _take_missing(entry, held)
                if why:
                    _unlink_held([(lock, fd) for lock, fd in held if lock in made])  # what this prune made for nothing
                    if why == "busy":
                        done.busy.append(entry)
                    else:
                        done.failed.append((entry, why))
                    continue
                try:
                    os.rename(entry.path, aside)
                except FileNotFoundError:
                    _unlink_held(held)  # gone meanwhile (another prune's): its lock files with it
                    total -= entry.bytes
                    continue
                except OSError as exc:
                    _unlink_held([(lock, fd) for lock, fd in held if lock in made])
                    done.failed.append((entry, f"{type(exc).__name__}: {exc}"))
                    continue
                if entry.kind == "torch_extensions":  # under the locks: a verdict that takes them next makes and marks a new folder
                    with contextlib.suppress(OSError):
                        (entry.path.parent / f"{entry.path.name}.used").unlink(missing_ok=True)
                _unlink_held(held)  # still held: a verdict that opened one before checks, once it holds it, that it is still there
        if not dry_run:
            why = _remove(aside)
            if why:
                done.failed.append((entry, why))
                total -= entry.bytes  # no longer an entry: the next prune's sweep
                continue
        done.removed.append(entry)
        total -= entry.bytes
    if progress is not None:
        progress(len(listed), len(listed))
    done.freed = sum(e.bytes for e in done.removed)
    done.kept_bytes = total
    return done
