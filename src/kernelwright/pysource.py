"""Parsing Python source from any thread.

CPython 3.11 keeps the AST converter's recursion-depth bookkeeping per interpreter, not per
thread: two threads in `ast.parse` at once can fail with "SystemError: AST constructor recursion
depth mismatch". The agent's tree search parses candidates in parallel branch threads (CI saw the
error in tests/test_agent_flow.py), so every parse in the package goes through one lock.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename)


def dotted(node: ast.AST) -> str | None:
    """'a.b.c' for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def names(node: ast.AST, modules: set[str], funcs: set[str], attrs: frozenset[str] | set[str]) -> bool:
    """Whether `node` names a function imported under the file's own names: a bare name in `funcs`
    (`from m import f [as g]`), or `M.attr` with M in `modules` (`import m [as M]`) and attr in `attrs`."""
    path = dotted(node)
    if path is None:
        return False
    if "." not in path:
        return path in funcs
    prefix, _, attr = path.rpartition(".")
    return attr in attrs and prefix in modules
