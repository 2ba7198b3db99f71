"""kernelwright.pysource: the package's one way to parse Python source (under a lock, see its
docstring). The race it guards against was seen once in CI and not reproduced on demand, so these
tests check the function's behaviour and that no module parses around it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kernelwright import pysource

SRC = Path(__file__).resolve().parents[1] / "src" / "kernelwright"


def test_parse_is_ast_parse():
    tree = pysource.parse("class ModelNew:\n    pass\n")
    assert isinstance(tree, ast.Module) and tree.body[0].name == "ModelNew"
    with pytest.raises(SyntaxError) as info:
        pysource.parse("def f(:\n", filename="model_new.py")
    assert info.value.filename == "model_new.py"


def test_no_module_calls_ast_parse_directly():
    direct = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
              if p.name != "pysource.py" and re.search(r"\bast\.parse\(", p.read_text())]
    assert direct == []
