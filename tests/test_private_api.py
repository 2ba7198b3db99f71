"""The judge's private names stay inside the judge (issue 27): no module outside
src/kernelwright/judge/ imports an underscore name of a `kernelwright.judge` module, nor reads one
(`mod._name`) or a child's state (`mod.S`) off an imported judge module. What code outside needs
of the judge is a public, documented function or a child's command."""

from __future__ import annotations

import ast
from pathlib import Path

from kernelwright.pysource import dotted

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "kernelwright"
JUDGE = "kernelwright.judge"
STATE = "S"  # a judge child's module state (judge.child_reference.S, judge.child_candidate.S)


def _private(name: str) -> bool:
    return name == STATE or (name.startswith("_") and not (name.startswith("__") and name.endswith("__")))


def _is_module(dotted: str, pkg: Path) -> bool:
    path = pkg.joinpath(*dotted.split(".")[1:])
    return path.is_dir() or path.with_suffix(".py").is_file()


def _judge(module: str) -> bool:
    return module == JUDGE or module.startswith(JUDGE + ".")


def offences(path: Path, pkg: Path = PKG) -> list[str]:
    """Each use of a private judge name in the module at `path`, as 'line: what'. A name bound to
    a judge module anywhere in the module (an import inside a function included) counts as that
    module wherever the module uses it: a function handed the module under the same name is seen."""
    tree = ast.parse(path.read_text())
    modules: dict[str, str] = {}  # local name -> the judge module it stands for
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if _judge(a.name):
                    modules[a.asname or a.name] = a.name  # `import kernelwright.judge.x` binds the dotted chain
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module and _judge(n.module):
            for a in n.names:
                if _private(a.name):
                    found.append(f"{n.lineno}: from {n.module} import {a.name}")
                elif _is_module(f"{n.module}.{a.name}", pkg):
                    modules[a.asname or a.name] = f"{n.module}.{a.name}"
    for n in ast.walk(tree):
        if not isinstance(n, ast.Attribute) or not _private(n.attr):
            continue
        base = dotted(n.value)
        if base is not None and (base in modules or (_judge(base) and _is_module(base, pkg))):
            found.append(f"{n.lineno}: {base}.{n.attr} ({modules.get(base, base)})")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def _outside_the_judge() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if (PKG / "judge") not in p.parents)


def test_no_module_outside_the_judge_uses_a_private_name_of_the_judge():
    found = {str(p.relative_to(PKG)): o for p in _outside_the_judge() if (o := offences(p))}
    assert not found, f"private judge names used outside the judge: {found}"


def test_the_check_sees_each_kind_of_private_use(tmp_path):
    """Not blind: an imported underscore name, one read off an imported judge module (the module
    handed to another function under its name included), a child's state, and a dotted import."""
    pkg = tmp_path / "kernelwright"
    (pkg / "judge").mkdir(parents=True)
    for name in ("child_reference", "inputs"):
        (pkg / "judge" / f"{name}.py").write_text("")
    mod = pkg / "user.py"
    mod.write_text(
        "from kernelwright.judge.child_reference import _forward\n"
        "from kernelwright.judge import inputs, child_reference as ref\n"
        "import kernelwright.judge.inputs\n"
        "def f():\n"
        "    return inputs._digest, inputs.make_inputs, inputs.__file__\n"
        "def g(ref):\n"
        "    return ref.S.model, ref.setup\n"
        "def h():\n"
        "    return kernelwright.judge.inputs._keyed\n"
    )
    assert offences(mod, pkg) == ["1: from kernelwright.judge.child_reference import _forward",
                                  "5: inputs._digest (kernelwright.judge.inputs)",
                                  "7: ref.S (kernelwright.judge.child_reference)",
                                  "9: kernelwright.judge.inputs._keyed (kernelwright.judge.inputs)"]


def test_what_synthesis_asks_of_the_reference_child_is_among_its_commands():
    """synth.filters calls these in its workers; a real reference child serves them too."""
    import pytest

    pytest.importorskip("torch")
    from kernelwright.judge.child_reference import handlers

    assert {"setup", "degeneracy", "breakdown", "repeat", "compiled", "time_eager", "release"} <= set(handlers())
