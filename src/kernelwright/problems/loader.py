"""Load problems in the KernelBench format: a file, or a folder of them.

Loading is static (AST only); the problem's code first runs in the judge's reference child, which
reports a failing get_inputs() or a non-deterministic reference as a ProblemError too.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

from kernelwright import pysource

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
OPTIONAL = ("get_test_inputs", "TOLERANCE", "DTYPE")


class ProblemError(ValueError):
    """A malformed problem: the user's error (exit code 2), naming the file and the cause."""


@dataclass(frozen=True)
class Problem:
    """A reference program in the KernelBench format."""

    name: str  # file stem, e.g. "softmax"
    path: Path  # absolute path of the .py file
    source: str  # its text
    hash: str  # sha256 of the text

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "hash": self.hash}


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def load_problem(spec: str | Path) -> Problem:
    """Load one problem file; raise ProblemError with the file and the cause when it is malformed."""
    text_spec = str(spec)
    if text_spec.startswith(("builtin:", "kernelbench:")):
        from kernelwright.problems.suite import resolve_problem

        return resolve_problem(text_spec)
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise ProblemError(f"{path}: no such problem file")
    if path.suffix != ".py":
        raise ProblemError(f"{path}: a problem is a .py file")
    raw = path.read_bytes()
    source = raw.decode("utf-8", errors="replace")
    try:
        tree = pysource.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    missing = [n for n in REQUIRED if n not in _top_level_names(tree)]
    if missing:
        raise ProblemError(f"{path}: missing {', '.join(missing)} (a problem needs class Model, get_inputs() and get_init_inputs())")
    name = path.parent.name if path.stem in ("problem", "model") else path.stem
    return Problem(name=name, path=path, source=source, hash=hashlib.sha256(raw).hexdigest())


def problem_files(spec: str | Path) -> list[Path]:
    """The problem files a path names: the file itself, or in a folder every `*.py` (sorted; files
    starting with _ skipped) and every `NAME/problem.py` (the shipped examples' layout, where
    `NAME/model_new.py` is the problem's solution)."""
    path = Path(spec).expanduser()
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
    files += sorted(p for p in path.glob("*/problem.py") if not p.parent.name.startswith(("_", ".")))
    if not files:
        raise ProblemError(f"{path.resolve()}: no problem files in this folder (*.py, or NAME/problem.py)")
    return files


def load_problems(spec: str | Path) -> list[Problem]:
    """A problem file, or every problem file in a folder (problem_files)."""
    if not Path(spec).expanduser().is_dir():
        return [load_problem(spec)]
    return [load_problem(p) for p in problem_files(spec)]
