"""What a command wrote, and what it did not and why: one short line per file, folder, group of store
rows or cache, always on stderr (so `--json` stdout stays machine-clean). Every command's lines are
worded by these functions, so they read alike:

    wrote PATH (what)                       a file or folder
    wrote in FOLDER: a, b, c                several files of one folder
    skipped NAME: why                       a file not written, and why
    recorded WHAT in the store PATH         rows of the SQLite store
    WHAT not recorded in the store: why
    cached WHAT: PATH (N new entries)       a cache that grew
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, Optional


def store_path(store: Optional[str | Path]) -> Path:
    """The store a command uses: its --store, else $KERNELWRIGHT_STORE or the user data dir."""
    from kernelwright.store.db import default_store_path

    return Path(store).expanduser() if store is not None else default_store_path()


def wrote(path: str | Path, what: str = "") -> str:
    return f"wrote {path}" + (f" ({what})" if what else "")


def wrote_in(folder: str | Path, names: Iterable[str]) -> str:
    return f"wrote in {folder}: " + (", ".join(names) or "no files")


def skipped(name: str | Path, why: str) -> str:
    return f"skipped {name}: {why}"


def recorded(what: str, store: Optional[str | Path]) -> str:
    return f"recorded {what} in the store {store_path(store)}"


def not_recorded(what: str, why: str) -> str:
    return f"{what} not recorded in the store: {why}"


def cached(what: str, path: str | Path, n_new: int) -> str:
    return f"cached {what}: {path} ({n_new} new entr{'y' if n_new == 1 else 'ies'})"


def files_in(folder: str | Path) -> list[str]:
    """The files under a folder, relative to it, sorted, and each empty folder as `NAME/` ([] when it
    cannot be read)."""
    folder = Path(folder)
    try:
        return sorted(str(p.relative_to(folder)) + ("/" if p.is_dir() else "") for p in folder.rglob("*")
                      if p.is_file() or (p.is_dir() and not any(p.iterdir())))
    except OSError:
        return []


def tell(lines: Iterable[str]) -> None:
    """Print the lines on stderr, as they are (no markup, no wrapping)."""
    for line in lines:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
