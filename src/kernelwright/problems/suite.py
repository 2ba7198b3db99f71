"""Problem suites: the built-in one shipped in the package, KernelBench checkouts, and plain folders.

A suite spec is one of:
  builtin                    every built-in problem (levels 1-3)
  builtin:LEVEL              one level of it (`builtin:1` or `builtin:level1`)
  kernelbench:PATH[:LEVEL]   a KernelBench checkout (PATH holds `KernelBench/levelN/` or `levelN/`)
  PATH                       a problem file, or a folder of them (`*.py`, and `NAME/problem.py` as the
                             shipped examples are laid out, each with its solution `NAME/model_new.py`)
and a single problem is `builtin:NAME`, `kernelbench:PATH:LEVEL:ID` or a path to a `.py` file.

The built-in problems live in `kernelwright/problems/builtin/levelN/NAME.py`; each names its
category in a module-level `CATEGORY = "..."`, read without running the file. KernelBench files are
named `ID_Name.py` inside `levelN/`; their problems have no category.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from kernelwright.problems.loader import Problem, ProblemError, load_problem, problem_files
from kernelwright import pysource

BUILTIN_ROOT = Path(__file__).resolve().parent / "builtin"
LEVELS = (1, 2, 3)
_KB_FILE = re.compile(r"^(\d+)_.+\.py$")


@dataclass(frozen=True)
class Entry:
    """One problem of a suite, with where it sits in it."""

    problem: Problem
    suite: str  # "builtin", "kernelbench" or "path"
    level: int | None  # None for a plain path
    category: str | None  # the file's CATEGORY, if it has one
    id: int | None = None  # KernelBench's problem number

    @property
    def spec(self) -> str:
        """How to name this problem on the command line."""
        if self.suite == "builtin":
            return f"builtin:{self.problem.name}"
        if self.suite == "kernelbench":
            root = self.problem.path.parent.parent
            return f"kernelbench:{root}:{self.level}:{self.id}"
        return str(self.problem.path)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.problem.name, "spec": self.spec, "suite": self.suite, "level": self.level, "category": self.category,
                "id": self.id, "path": str(self.problem.path), "hash": self.problem.hash}


@dataclass(frozen=True)
class Unloaded:
    """A file of a suite that did not load as a problem, and why (load_suite with `unloaded=`)."""

    name: str  # what it would have been called
    path: Path  # the file
    level: int | None  # its level, where the suite has levels
    reason: str  # the loader's message

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "path": str(self.path), "level": self.level, "error": self.reason}


def _load_each(files: list[tuple[int | None, Path]], unloaded: list[Unloaded] | None) -> list[tuple[int | None, Path, Problem]]:
    """(level, path, problem) for the files that load; a file that does not raises its ProblemError,
    or, when `unloaded` is a list, goes there and the others still load."""
    out = []
    for level, path in files:
        try:
            out.append((level, path, load_problem(path)))
        except ProblemError as exc:
            if unloaded is None:
                raise
            name = path.parent.name if path.stem in ("problem", "model") else path.stem
            unloaded.append(Unloaded(name, path.resolve(), level, str(exc)))
    return out


def category_of(problem: Problem) -> str | None:
    """The string assigned to CATEGORY at the top level of the file, read statically; None if absent."""
    try:
        tree = pysource.parse(problem.source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CATEGORY" for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def _parse_level(text: str, spec: str) -> int:
    m = re.fullmatch(r"(?:level)?(\d+)", text.strip().lower())
    if not m:
        raise ProblemError(f"{spec}: {text!r} is not a level (write 1, 2, 3 or level1, ...)")
    return int(m.group(1))


def _builtin_files(level: int | None = None) -> list[tuple[int, Path]]:
    out = []
    for lv in LEVELS:
        if level is not None and lv != level:
            continue
        folder = BUILTIN_ROOT / f"level{lv}"
        out.extend((lv, p) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_"))
    return out


def builtin_names() -> list[str]:
    """Every built-in problem's name, sorted by level then name."""
    return [p.stem for _, p in _builtin_files()]


def _builtin_entry(level: int, path: Path) -> Entry:
    problem = load_problem(path)
    problem = Problem(name=path.stem, path=problem.path, source=problem.source, hash=problem.hash)
    return Entry(problem, "builtin", level, category_of(problem))


def builtin_problem(name: str) -> Entry:
    """The built-in problem called name; ProblemError naming close matches when there is none."""
    for lv, path in _builtin_files():
        if path.stem == name:
            return _builtin_entry(lv, path)
    import difflib

    close = difflib.get_close_matches(name, builtin_names(), n=3)
    hint = f"; did you mean {', '.join('builtin:' + c for c in close)}?" if close else "; `kernelwright problems list` lists them"
    raise ProblemError(f"builtin:{name}: no such built-in problem{hint}")


def _kernelbench_root(path: Path, spec: str) -> Path:
    """The folder holding level1/, level2/, ...: PATH itself or PATH/KernelBench."""
    path = path.expanduser()
    for cand in (path / "KernelBench", path):
        if cand.is_dir() and any(cand.glob("level[0-9]*")):
            return cand.resolve()
    raise ProblemError(f"{spec}: {path} holds no KernelBench layout (expected levelN/ folders there or under KernelBench/)")


def _kernelbench_entries(root: Path, level: int | None, spec: str, unloaded: list[Unloaded] | None = None,
                         pid: int | None = None) -> list[Entry]:
    """The problems of one level or all; only problem `pid` when given (the other files are not read)."""
    levels = sorted(int(p.name[5:]) for p in root.glob("level[0-9]*") if p.is_dir() and p.name[5:].isdigit())
    if level is not None:
        if level not in levels:
            raise ProblemError(f"{spec}: no level{level}/ under {root} (levels there: {', '.join(map(str, levels)) or 'none'})")
        levels = [level]
    files, ids = [], {}
    for lv in levels:
        found = [(int(m.group(1)), p) for p in (root / f"level{lv}").glob("*.py") if (m := _KB_FILE.match(p.name))]
        files.extend((lv, p) for i, p in sorted(found) if pid is None or i == pid)
        ids.update((p, i) for i, p in found)
    if not files and pid is not None:
        raise ProblemError(f"{spec}: no problem {pid} in level {level} under {root}")
    if not files:
        raise ProblemError(f"{spec}: no KernelBench problem files (ID_Name.py) under {root}")
    return [Entry(problem, "kernelbench", lv, category_of(problem), ids[path]) for lv, path, problem in _load_each(files, unloaded)]


def _split_kernelbench(spec: str) -> tuple[Path, list[str]]:
    """kernelbench:PATH[:LEVEL[:ID]] -> (PATH, [LEVEL, ID]); PATH may itself hold colons only
    when it exists as written."""
    body = spec[len("kernelbench:"):]
    if not body:
        raise ProblemError(f"{spec}: write kernelbench:PATH[:LEVEL[:ID]]")
    parts = body.split(":")
    for n in range(len(parts), 0, -1):
        path = Path(":".join(parts[:n])).expanduser()
        if path.exists():
            return path, parts[n:]
    raise ProblemError(f"{spec}: no such folder {parts[0]!r}")


def load_suite(spec: str, *, unloaded: list[Unloaded] | None = None) -> list[Entry]:
    """Every problem a suite spec names (see the module docstring); ProblemError when it names none.
    A file of a KernelBench checkout or a folder that does not load raises its ProblemError, unless
    `unloaded` is a list: then it is recorded there and the rest of the suite still loads."""
    spec = str(spec).strip()
    if spec == "builtin" or spec.startswith("builtin:"):
        rest = spec[len("builtin:"):] if ":" in spec else ""
        if rest and not re.fullmatch(r"(?:level)?\d+", rest.lower()):
            return [builtin_problem(rest)]
        level = _parse_level(rest, spec) if rest else None
        if level is not None and level not in LEVELS:
            raise ProblemError(f"{spec}: the built-in suite has levels {', '.join(map(str, LEVELS))}")
        return [_builtin_entry(lv, p) for lv, p in _builtin_files(level)]
    if spec.startswith("kernelbench:"):
        return _kernelbench_suite(spec, unloaded)
    loaded = _load_each([(None, p) for p in problem_files(spec)], unloaded if Path(spec).expanduser().is_dir() else None)
    return [Entry(p, "path", None, category_of(p)) for _, _, p in loaded]


def _kernelbench_suite(spec: str, unloaded: list[Unloaded] | None) -> list[Entry]:
    path, rest = _split_kernelbench(spec)
    root = _kernelbench_root(path, spec)
    if len(rest) > 2:
        raise ProblemError(f"{spec}: write kernelbench:PATH[:LEVEL[:ID]]")
    level = _parse_level(rest[0], spec) if rest else None
    if len(rest) < 2:
        return _kernelbench_entries(root, level, spec, unloaded)
    if not rest[1].isdigit():
        raise ProblemError(f"{spec}: {rest[1]!r} is not a problem number")
    return _kernelbench_entries(root, level, spec, unloaded, int(rest[1]))


def resolve_problem(spec: str | Path) -> Problem:
    """One problem from `builtin:NAME`, `kernelbench:PATH:LEVEL:ID` or a file path."""
    text = str(spec)
    if text.startswith("builtin:"):
        return builtin_problem(text[len("builtin:"):]).problem
    if text.startswith("kernelbench:"):
        path, rest = _split_kernelbench(text)
        if len(rest) != 2:
            raise ProblemError(f"{text}: one KernelBench problem is kernelbench:PATH:LEVEL:ID")
        return load_suite(text)[0].problem
    return load_problem(spec)
