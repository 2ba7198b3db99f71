"""The package's layout as STYLE.md and DESIGN.md state it: no module over 500 lines, and layers that
import one way (DESIGN.md, Layout). What is still out of line is listed here by name, so the test
fails on anything new and on any listed entry that grows or is fixed without being struck off."""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "kernelwright"
MAX_LINES = 500
# Modules over the limit, at their length when this list was last set: none may grow; each comes off when split.
OVER_LIMIT: dict[str, int] = {}
# Layers, lowest first (DESIGN.md): a module may import its own layer's packages and those below.
# `commands.py`, `*_cli.py`, `cli.py`, `flags.py` and `__main__.py` modules are the command layer wherever they live.
LAYERS = (("core",), ("store", "written"), ("problems", "runtime"), ("judge",), ("client",), ("llm",), ("agent", "workspace", "rl"),
          ("report", "synth"), ("cli",))
CORE_MODULES = ("errors", "pysource", "console", "core")  # top-level modules and the core package
# Imports that run a layer backwards today, by (importing package, imported package): each comes off when fixed (issue 27).
KNOWN_BACKWARDS: set[tuple[str, str]] = set()


def _node(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "kernelwright":
        return None
    if len(parts) == 1 or parts[1] in CORE_MODULES:
        return "core"
    if parts[-1] in ("commands", "cli", "flags", "__main__") or parts[-1].endswith("_cli"):
        return "cli"
    return parts[1]


def _exists(module: str) -> bool:
    path = PKG.joinpath(*module.split(".")[1:])
    return path.is_dir() or path.with_suffix(".py").is_file()


def _edges() -> dict[tuple[str, str], set[str]]:
    """(importing node, imported node) -> the files that import so; imports inside functions included."""
    edges: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        src = _node(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                names = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
            else:
                continue
            for name in names:
                dst = _node(name)
                if dst and dst != src and _exists(name):
                    edges[(src, dst)].add(str(path.relative_to(PKG)))
    return edges


def _layer(node: str) -> int:
    for i, members in enumerate(LAYERS):
        if node in members:
            return i
    raise AssertionError(f"package {node} is in no layer: add it to LAYERS")


def test_no_module_is_over_the_size_limit_unless_listed_and_none_listed_grows():
    found = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    new = {m: n for m, n in found.items() if n > MAX_LINES and m not in OVER_LIMIT}
    grown = {m: (found.get(m), n) for m, n in OVER_LIMIT.items() if found.get(m, 0) > n}
    fixed = [m for m, n in OVER_LIMIT.items() if found.get(m, 0) <= MAX_LINES]
    assert not new, f"modules over {MAX_LINES} lines: {new}"
    assert not grown, f"listed modules that grew (now, listed): {grown}"
    assert not fixed, f"now within the limit: strike them off OVER_LIMIT: {fixed}"


def test_layers_import_one_way():
    backwards = {(s, d): files for (s, d), files in _edges().items() if _layer(d) > _layer(s)}
    new = {k: sorted(v) for k, v in backwards.items() if k not in KNOWN_BACKWARDS}
    gone = KNOWN_BACKWARDS - set(backwards)
    assert not new, f"imports that run a layer backwards: {new}"
    assert not gone, f"fixed: strike them off KNOWN_BACKWARDS: {gone}"


def test_no_import_cycle_between_packages_beyond_the_known_backward_imports():
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for (s, d) in _edges():
        if (s, d) not in KNOWN_BACKWARDS:
            graph[s].add(d)
    seen: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph[node]):
            assert seen.get(nxt) != 1, f"import cycle: {' -> '.join(path + [node, nxt])}"
            if nxt not in seen:
                visit(nxt, path + [node])
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node, [])


def _named(path: Path) -> set[str]:
    """Module names a file holds as whole strings ("kernelwright.synth.worker"): an import by name
    (importlib) that the import statements above do not show."""
    found = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"kernelwright(\.\w+)+", n.value):
            found.add(n.value)
    return found


def test_no_module_names_a_module_of_a_layer_above_its_own():
    """A layer above the judge that needs a child of its own (synthesis's workers) names its command
    module in the child's config (judge.workers, the hosted role); the judge never names it."""
    upward = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        src = _node(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        for name in _named(path):
            dst = _node(name)
            if dst and dst != src and _exists(name) and _layer(dst) > _layer(src):
                upward[str(path.relative_to(PKG))] = name
    assert not upward, f"modules named by a layer below theirs: {upward}"


def test_the_layer_check_sees_a_backward_import(tmp_path, monkeypatch):
    """The check is not blind: a store module importing the agent is found."""
    pkg = tmp_path / "kernelwright"
    (pkg / "store").mkdir(parents=True)
    (pkg / "agent").mkdir()
    (pkg / "agent" / "records.py").write_text("")
    (pkg / "store" / "db.py").write_text("from kernelwright.agent.records import X\n")
    monkeypatch.setitem(globals(), "PKG", pkg)  # the module's own globals, which _edges reads
    assert ("store", "agent") in _edges()


def test_the_name_check_sees_a_module_named_from_below(tmp_path):
    """The string check is not blind: a judge module naming a synth module as a string is found."""
    f = tmp_path / "workers.py"
    f.write_text('COMMANDS = "kernelwright.synth.worker"\nOTHER = "not a module name"\n')
    assert _named(f) == {"kernelwright.synth.worker"}
    assert _layer(_node("kernelwright.synth.worker")) > _layer(_node("kernelwright.judge.workers"))


@pytest.mark.parametrize("module", ("phases", "phases_timing", "phases_pricing"))
def test_the_phases_read_the_evaluation_context_not_the_flow(module):
    # the phase modules type against judge.context.Context; importing judge.evaluate from one (even inside
    # a function) would bring back modules importing each other
    tree = ast.parse((PKG / "judge" / f"{module}.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "kernelwright.judge.evaluate" not in imported
    assert "kernelwright.judge.context" in imported
