"""A problem's sizes: the full dimensions its file states, and a smaller CPU size it may declare.

The built-in problems are sized for the H200 (hundreds of MB of data each); on a CPU one verdict at
that size takes minutes and gigabytes. A problem file declares its CPU size as a module-level dict
literal of overrides for its own size constants, beside them:

    BATCH, TIME, FEATURES = 64, 4096, 512
    CPU_SIZE = {"BATCH": 4, "TIME": 257, "FEATURES": 96}

At CPU size the file runs as written, except that each statement binding an overridden constant
is followed by that constant's CPU value, so constants derived from it later in the file follow
it. An override can never be ignored silently: every name must be bound exactly once, by a plain
top-level assignment, and after the import the module must hold each override's value, or the
problem is malformed (ProblemError). Sizes apply to get_inputs() and get_init_inputs(); the extra
shapes of get_test_inputs() are small already and only follow a constant where they use one.

Which size a verdict uses (`resolve`): `full` on a GPU, `cpu` on the CPU backend when the file
declares one (else `full`); a policy's `size` forces one. The problem's identity (its hash) stays
its file's text: a size is how the file is run, like the device, and every cache whose contents
depend on it (warm reference children, stored baselines) keys on the size too.

Runs in the judge and in its children: the standard library only.
"""

from __future__ import annotations

import ast
from types import CodeType, ModuleType
from typing import Any

from kernelwright import pysource
from kernelwright.problems.loader import ProblemError

SIZES = ("auto", "full", "cpu")  # what a policy may ask for; a verdict records full or cpu
HELP = ("the problem's size: auto (the CPU size the problem declares on the CPU backend, the full size on a GPU), "
        "full (its stated, H200-sized dimensions) or cpu (its CPU_SIZE); the verdict records the size used")
NAME = "CPU_SIZE"


def _bound_names(node: ast.stmt) -> list[str]:
    """Names a top-level statement binds (assignments and definitions; imports by their names)."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    else:  # for, with, if, try...: whatever they bind, a walk finds it
        return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    names = []
    for t in targets:
        names += [n.id for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    return names


def _declaration(tree: ast.Module, where: str) -> dict[str, Any] | None:
    """The CPU_SIZE dict of a parsed file, validated as a declaration; None when it has none."""
    nodes = [n for n in tree.body if NAME in _bound_names(n)]
    if not nodes:
        return None
    node = nodes[0]
    if len(nodes) > 1 or not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.value, ast.Dict):
        raise ProblemError(f"{where}: {NAME} must be assigned once, as a dict literal of size constants and their CPU values")
    try:
        sizes = ast.literal_eval(node.value)
    except ValueError:
        raise ProblemError(f"{where}: {NAME} must hold literal values only (numbers, tuples, lists)") from None
    if not sizes or not all(isinstance(k, str) and k.isidentifier() for k in sizes):
        raise ProblemError(f"{where}: {NAME} must name at least one size constant, each as a string, got {list(sizes)}")
    return sizes


def _binding(tree: ast.Module, name: str, where: str) -> ast.stmt:
    """The one top-level plain assignment that binds `name`; ProblemError otherwise."""
    nodes = [n for n in tree.body if name in _bound_names(n)]
    if not nodes:
        raise ProblemError(f"{where}: {NAME} overrides {name}, which the file never assigns at its top level")
    if len(nodes) > 1:
        lines = ", ".join(str(n.lineno) for n in nodes)
        raise ProblemError(f"{where}: {NAME} overrides {name}, which the file binds more than once (lines {lines}): "
                           f"which binding the CPU size replaces would be ambiguous")
    node = nodes[0]
    if not isinstance(node, ast.Assign) and not (isinstance(node, ast.AnnAssign) and node.value is not None):
        raise ProblemError(f"{where}: {NAME} overrides {name}, bound at line {node.lineno} by a {type(node).__name__}; "
                           f"a size constant is a plain assignment (NAME = value, or A, B = 1, 2)")
    return node


def declared(source: str | bytes, where: str = "<problem>") -> dict[str, Any] | None:
    """The file's CPU size (its CPU_SIZE overrides), checked against its own constants; None
    when it declares none. ProblemError names what is malformed."""
    try:
        tree = pysource.parse(source, filename=where)
    except SyntaxError as exc:
        raise ProblemError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from None
    sizes = _declaration(tree, where)
    for name in sizes or ():
        _binding(tree, name, where)
    return sizes


def resolve(source: str | bytes, requested: str, device: str, where: str = "<problem>") -> str:
    """The size a verdict on `device` uses when `requested` (auto, full or cpu): auto is cpu on the
    CPU backend for a file that declares a CPU size, full otherwise."""
    if requested not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {requested!r}")
    sizes = declared(source, where)  # a malformed declaration is refused whatever the size
    if requested == "cpu" and sizes is None:
        raise ProblemError(f"{where}: size cpu was asked for, but the problem declares no {NAME} (a dict of its size "
                           f"constants' CPU values)")
    if requested == "auto":
        return "cpu" if device == "cpu" and sizes is not None else "full"
    return requested


def sized_code(source: str | bytes, filename: str, size: str) -> tuple[CodeType, dict[str, Any]]:
    """(code, overrides): the problem compiled at `size`, and the constants it must hold after its
    import ({} at full size). At cpu size each overridden constant's binding is followed by its
    CPU value, on the binding's line (tracebacks keep the file's line numbers)."""
    if size == "full":
        return compile(source, filename, "exec", dont_inherit=True), {}
    if size != "cpu":
        raise ValueError(f"a problem is run at size full or cpu, got {size!r}")
    tree = pysource.parse(source, filename=filename)
    sizes = _declaration(tree, filename)
    if sizes is None:
        raise ProblemError(f"{filename}: size cpu was asked for, but the problem declares no {NAME}")
    after: dict[int, list[ast.stmt]] = {}
    for name, value in sizes.items():
        node = _binding(tree, name, filename)
        stmt = pysource.parse(f"{name} = {value!r}").body[0]
        for n in ast.walk(stmt):
            ast.copy_location(n, node)
            n.end_lineno, n.end_col_offset = node.lineno, node.col_offset  # type: ignore[attr-defined]
        after.setdefault(id(node), []).append(stmt)
    body: list[ast.stmt] = []
    for node in tree.body:
        body += [node, *after.get(id(node), [])]
    tree.body = body
    return compile(tree, filename, "exec", dont_inherit=True), sizes


def check_applied(module: ModuleType, overrides: dict[str, Any], where: str) -> None:
    """After the import: every override holds (a file that rebinds a constant another way, through
    globals() say, would otherwise run at a size nobody declared)."""
    wrong = [name for name, value in overrides.items() if getattr(module, name, None) != value]
    if wrong:
        raise ProblemError(f"{where}: after its import at CPU size, {', '.join(wrong)} no longer hold the values {NAME} gives")
