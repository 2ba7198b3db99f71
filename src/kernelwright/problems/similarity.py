"""AST similarity between problem files: how close two programs are once names and numbers are set aside.

A program is reduced to a token stream of its abstract syntax tree, in source order: each node's type,
the operator of every operation, attribute and keyword names (they name the torch functions called, so
`F.gelu` and `F.silu` differ), and each local name as the order in which it first appeared (so renaming
a variable changes nothing). Numbers become their type alone, and docstrings are dropped, so a problem
that only changes its sizes is the same program. The similarity of two programs is difflib's ratio of
the two token streams: 2 * matches / (len(a) + len(b)), 1.0 for identical streams.

The threshold of 0.9 for "too similar" follows CUDA Agent's decontamination of its synthesised tasks
against KernelBench; the token stream and the ratio are this project's own choice.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from typing import Iterable

from kernelwright import pysource

THRESHOLD = 0.9


class _Tokens(ast.NodeVisitor):
    def __init__(self) -> None:
        self.out: list[str] = []
        self.names: dict[str, int] = {}

    def _name(self, name: str) -> str:
        return f"v{self.names.setdefault(name, len(self.names))}"

    def generic_visit(self, node: ast.AST) -> None:
        self.out.append(type(node).__name__)
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.AugAssign)):
            self.out.append(type(node.op).__name__)
        elif isinstance(node, ast.Compare):
            self.out.extend(type(o).__name__ for o in node.ops)
        elif isinstance(node, ast.Attribute):
            self.out.append("." + node.attr)
        elif isinstance(node, ast.keyword):
            self.out.append(f"{node.arg}=")
        elif isinstance(node, ast.Name):
            self.out.append(self._name(node.id))
        elif isinstance(node, ast.arg):
            self.out.append(self._name(node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            # the KernelBench names (Model, forward, get_inputs, ...) mean something; others are local
            self.out.append(node.name if node.name in _FIXED else self._name(node.name))
        elif isinstance(node, ast.alias):
            self.out.append(node.name)
        elif isinstance(node, ast.Constant):
            self.out.append("str" if isinstance(node.value, str) else type(node.value).__name__)
            return
        super().generic_visit(node)


_FIXED = {"Model", "ModelNew", "forward", "__init__", "get_inputs", "get_init_inputs", "get_test_inputs"}


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]


def tokens(source: str) -> list[str]:
    """The normalised token stream of a program (SyntaxError for a file that does not parse)."""
    tree = pysource.parse(source)
    _strip_docstrings(tree)
    visitor = _Tokens()
    visitor.visit(tree)
    return visitor.out


def similarity(a: str | list[str], b: str | list[str]) -> float:
    """difflib's ratio of two programs' token streams (source text or tokens()), in [0, 1]."""
    ta = tokens(a) if isinstance(a, str) else a
    tb = tokens(b) if isinstance(b, str) else b
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def bounded_ratio(ta: list[str], tb: list[str], threshold: float) -> float | None:
    """The ratio of two token streams, or None where a cheap upper bound (the lengths, then the token
    multisets) already keeps it under the threshold."""
    n, m = len(ta), len(tb)
    if n + m == 0 or 2 * min(n, m) / (n + m) < threshold:
        return None
    sm = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    if sm.real_quick_ratio() < threshold or sm.quick_ratio() < threshold:
        return None
    return sm.ratio()


@dataclass(frozen=True)
class Pair:
    """Two programs at or above the threshold."""

    a: str
    b: str
    similarity: float

    def to_dict(self) -> dict[str, object]:
        return {"a": self.a, "b": self.b, "similarity": round(self.similarity, 4)}


def similar_pairs(named: dict[str, str], threshold: float = THRESHOLD, against: dict[str, str] | None = None) -> list[Pair]:
    """Pairs with similarity >= threshold, most similar first: within `named`, or, with `against`,
    each program of `named` against each of `against`. Pairs that cannot reach the threshold on
    length alone are skipped without comparing."""
    toks = {k: tokens(v) for k, v in named.items()}
    other = {k: tokens(v) for k, v in against.items()} if against is not None else None
    pairs: Iterable[tuple[str, str]]
    if other is None:
        keys = sorted(toks)
        pairs = ((x, y) for i, x in enumerate(keys) for y in keys[i + 1:])
        lookup = toks
    else:
        pairs = ((x, y) for x in sorted(toks) for y in sorted(other))
        lookup = {**other, **{("\0" + k): v for k, v in toks.items()}}
    found = []
    for x, y in pairs:
        r = bounded_ratio(toks[x], lookup[y] if other is not None else toks[y], threshold)
        if r is not None and r >= threshold:
            found.append(Pair(x, y, r))
    return sorted(found, key=lambda p: -p.similarity)
