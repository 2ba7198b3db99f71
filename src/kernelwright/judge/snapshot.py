"""A private copy of a candidate, taken before anything runs: the judge builds, imports and hashes
the copy, so a candidate that rewrites its own files (through __file__) changes nothing it was
judged on, and the store can keep exactly the files that were judged."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".cpp", ".cc", ".c", ".h", ".hh", ".hpp", ".inc", ".inl"}
MAX_BYTES = 16 * 2**20  # a candidate larger than this is refused


def candidate_files(path: str | Path) -> dict[str, Path]:
    """{relative name: file} of a candidate. A folder: everything in it (sub-folders too, but not
    caches or hidden entries). A .py file: that file, the source files beside it, and kernels/.
    Raises ValueError naming the path when malformed or too large."""
    path = Path(path)
    if path.is_dir():
        root, main = path, path / "model_new.py"
        if not main.is_file():
            raise ValueError(f"{path.resolve()}: a candidate folder must hold model_new.py")
        others = [p for p in sorted(root.rglob("*")) if p.is_file() and not _skipped(p.relative_to(root))]
    elif path.is_file() and path.suffix == ".py":
        root, main = path.parent, path
        others = [p for p in sorted(root.iterdir()) if p.is_file() and p.suffix in SOURCE_SUFFIXES]
        kernels = root / "kernels"
        if kernels.is_dir():
            others += [p for p in sorted(kernels.rglob("*")) if p.is_file() and not _skipped(p.relative_to(root))]
    else:
        raise ValueError(f"{path.resolve()}: a candidate is a .py file or a folder holding model_new.py")
    files = {main.name: main}
    files.update({p.relative_to(root).as_posix(): p for p in others})
    total = sum(p.stat().st_size for p in files.values())
    if total > MAX_BYTES:
        raise ValueError(f"{path.resolve()}: candidate files add up to {total} bytes, over the {MAX_BYTES}-byte limit")
    return files


def _skipped(rel: Path) -> bool:
    return any(part == "__pycache__" or part.startswith(".") for part in rel.parts)


MAIN = "model_new.py"  # the main file's usual name: left out of the hash, so hashes from before it counted stay valid


def files_hash(path: str | Path) -> str:
    """sha256 over every file of the candidate, names included, in a stable order, and over which
    file is the main one where it is not model_new.py: two single-file candidates of one folder
    (a.py, b.py) hold the same files but are different candidates.

    Entries are `name NUL bytes NUL`, which splits one way only while no file holds a NUL byte
    (names never do). Where one does, every name and content is length-prefixed instead, after a
    marker no other stream starts with, so two different candidates never share a hash."""
    files = candidate_files(path)
    contents = {name: file.read_bytes() for name, file in files.items()}
    digest = hashlib.sha256()
    main = next(iter(files))
    if any(b"\0" in data for data in contents.values()):
        digest.update(b"\0v2\0")
        entries = ([b"main", main.encode()] if main != MAIN else []) + [x for name in sorted(contents) for x in (name.encode(), contents[name])]
        for part in entries:
            digest.update(len(part).to_bytes(8, "big") + part)
        return digest.hexdigest()
    if main != MAIN:
        digest.update(b"\0main\0" + main.encode() + b"\0")  # no file's entry starts with NUL
    for name in sorted(contents):
        digest.update(name.encode() + b"\0" + contents[name] + b"\0")
    return digest.hexdigest()


def main_name(path: str | Path) -> str:
    """The candidate's main file, as its files name it: a .py file's own name, model_new.py for a folder."""
    path = Path(path)
    return MAIN if path.is_dir() else path.name


def read_candidate(path: str | Path) -> dict[str, str]:
    """The candidate's files as text, for the store."""
    return {name: p.read_text(errors="replace") for name, p in candidate_files(path).items()}


def snapshot(path: str | Path, dest: Path) -> Path:
    """Copy the candidate into dest; returns the copy's main .py file."""
    files = candidate_files(path)
    dest.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    main = next(iter(files))
    return dest / main
