"""A folder holding one candidate (model_new.py, optional kernels/), which the model edits through
its tools. Every path the model names is confined to the folder: absolute paths, `..`, symlinks
that lead out and names that are not plain relative paths are refused with a ValueError whose text
the tools show the model.

Nothing here runs candidate code; `files()` and `hash()` read exactly what the judge would read
(judge.snapshot).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path, PurePosixPath

from kernelwright.judge.snapshot import MAX_BYTES, files_hash, read_candidate, snapshot

MAIN = "model_new.py"
MAX_WRITE_BYTES = 512 * 1024  # one file the model writes
WRITABLE_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp", ".c", ".txt", ".md")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".cache", ".git"}
READ_LIMIT = 64_000  # characters read() returns by default
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")  # one plain path component


RESERVED = ("__init__.py", "verdict.json", "run.json", "SUMMARY.md", "recording.json")  # what an export adds beside the candidate

class Workspace:
    """One candidate's folder; created when missing.

    `judged_as_file`: the judge reads `model_new.py` as a file (it, the source files beside it and
    `kernels/`) rather than the whole folder, so that other files of the folder (an engineer's
    workspace: the reference, SKILL.md, notes) are not part of the candidate. `protected`: names
    (files, or folders with everything under them) that write() refuses.
    """

    def __init__(self, root: Path, *, judged_as_file: bool = False, protected: tuple[str, ...] = ()) -> None:
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()
        self.judged_as_file = judged_as_file
        self.protected = tuple(protected)

    @property
    def candidate_path(self) -> Path:
        """What the judge is given: the folder, or its model_new.py (see judged_as_file)."""
        return self.root / MAIN if self.judged_as_file else self.root

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    # -- paths --------------------------------------------------------------------------------

    def resolve(self, rel: str) -> Path:
        """The absolute path of `rel` inside the workspace; ValueError when it is not a plain
        relative name or leads outside (through `..` or a symlink)."""
        if not isinstance(rel, str) or not rel.strip():
            raise ValueError(f"a path must be a non-empty relative name like 'model_new.py' or 'kernels/add.cu', got {rel!r}")
        if "\\" in rel or "\0" in rel:
            raise ValueError(f"{rel!r}: use '/' between folders and no control characters")
        pure = PurePosixPath(rel)
        if pure.is_absolute() or rel.startswith("~"):
            raise ValueError(f"{rel!r}: absolute paths are not allowed; name files relative to the workspace, e.g. 'model_new.py'")
        parts = [p for p in pure.parts if p != "."]
        if ".." in parts:
            raise ValueError(f"{rel!r}: '..' is not allowed; every file stays inside the workspace")
        bad = [p for p in parts if not _PART.match(p)]
        if bad:
            raise ValueError(f"{rel!r}: {bad[0]!r} is not a plain name (letters, digits, '_', '-', '.', '+'; no leading '.' or '-')")
        target = self.root.joinpath(*parts)
        real = target.resolve()
        if real != self.root and self.root not in real.parents:
            raise ValueError(f"{rel!r} leads outside the workspace (through a symbolic link)")
        return target

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # -- reading ------------------------------------------------------------------------------

    def read(self, rel: str, limit: int = READ_LIMIT) -> str:
        """A text file's content, cut to `limit` characters with a note saying so."""
        path = self.resolve(rel)
        if not path.is_file():
            raise ValueError(f"{rel!r} is not a file in the workspace; files: {', '.join(self.list()) or 'none yet'}")
        text = path.read_text(errors="replace")
        if len(text) > limit:
            return text[:limit] + f"\n... [{len(text) - limit} more characters not shown]"
        return text

    def list(self, rel: str = ".") -> list[str]:
        """Files under `rel`, as sorted names relative to the workspace (caches and hidden entries left out)."""
        base = self.resolve(rel) if rel not in (".", "") else self.root
        if base.is_file():
            return [self._rel(base)]
        if not base.is_dir():
            raise ValueError(f"{rel!r} is not a folder in the workspace")
        found = []
        for path in sorted(base.rglob("*")):
            parts = path.relative_to(self.root).parts
            if any(p in SKIPPED_DIRS or p.startswith(".") for p in parts):
                continue
            if path.is_file() and not path.is_symlink():
                found.append(self._rel(path))
        return found

    # -- writing ------------------------------------------------------------------------------

    def write(self, rel: str, text: str) -> Path:
        """Write a text file (parent folders created inside the workspace); returns its path."""
        if not isinstance(text, str):
            raise ValueError(f"content must be text, got {type(text).__name__}")
        path = self.resolve(rel)
        rel_name = self._rel(path)
        if rel_name in RESERVED:
            raise ValueError(f"{rel!r} is a name the exported package writes itself ({', '.join(RESERVED)}); choose another")
        lowered = rel_name.lower()  # a case-insensitive file system would map SKILL.md and skill.md to one file
        if any(lowered == p.lower() or lowered.startswith(p.lower().rstrip("/") + "/") for p in self.protected):
            raise ValueError(f"{rel!r} is read-only in this workspace (protected: {', '.join(self.protected)})")
        if path.suffix.lower() not in WRITABLE_SUFFIXES:
            raise ValueError(f"{rel!r}: only source and text files may be written ({' '.join(WRITABLE_SUFFIXES)})")
        size = len(text.encode("utf-8", errors="replace"))
        if size > MAX_WRITE_BYTES:
            raise ValueError(f"{rel!r}: {size} bytes is over the {MAX_WRITE_BYTES}-byte limit for one file")
        if path.is_dir():
            raise ValueError(f"{rel!r} is a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            path.unlink()  # write a file of our own, never through a link
        path.write_text(text, errors="replace")
        return path

    def clear(self) -> None:
        """Remove everything in the workspace (links are removed, never followed)."""
        for entry in list(self.root.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def load(self, files: dict[str, str]) -> None:
        """Replace the workspace's contents with these files ({relative name: text})."""
        total = sum(len(t.encode("utf-8", errors="replace")) for t in files.values())
        if total > MAX_BYTES:
            raise ValueError(f"the files add up to {total} bytes, over the {MAX_BYTES}-byte limit")
        targets = {name: self.resolve(name) for name in files}  # every name checked before anything is removed
        self.clear()
        for name, text in files.items():
            targets[name].parent.mkdir(parents=True, exist_ok=True)
            targets[name].write_text(text, errors="replace")

    # -- what the judge reads -----------------------------------------------------------------

    def has_candidate(self) -> bool:
        return (self.root / MAIN).is_file()

    def files(self) -> dict[str, str]:
        """The files the judge would read and the store would keep ({} before model_new.py exists)."""
        return read_candidate(self.candidate_path) if self.has_candidate() else {}

    def hash(self) -> str:
        """The candidate's content hash (the judge's); ValueError before model_new.py exists."""
        if not self.has_candidate():
            raise ValueError(f"the workspace has no {MAIN} yet")
        return files_hash(self.candidate_path)

    def snapshot_to(self, dest: Path) -> Path:
        """Copy the candidate into `dest` (as the judge copies it); returns `dest`."""
        if not self.has_candidate():
            raise ValueError(f"the workspace has no {MAIN} yet")
        snapshot(self.candidate_path, Path(dest))
        return Path(dest)
