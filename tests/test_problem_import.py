"""The judge runs a problem's text, never bytecode cached beside it: a forged .pyc in the problem's
__pycache__ (same recorded mtime and size as the source, so Python's own loader would take it)
changes nothing."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import shutil
from pathlib import Path

import pytest

from conftest import candidate, correctness_policy, problem
from kernelwright.judge.inputs import import_file

REAL = "def value():\n    return 1.0  # the real one\n"
FAKE = "def value():\n    return 2.0  # forged text!\n"


def _forge(path: Path, real: str, fake: str) -> None:
    """Write `real` at `path` with a valid cached .pyc of `fake` beside it (same mtime and size)."""
    assert len(real.encode()) == len(fake.encode())
    path.write_text(fake)
    stamp = path.stat().st_mtime_ns
    py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)), doraise=True)
    path.write_text(real)
    os.utime(path, ns=(stamp, stamp))


def test_import_file_runs_the_text_not_a_forged_pyc(tmp_path: Path) -> None:
    path = tmp_path / "prob.py"
    _forge(path, REAL, FAKE)
    spec = importlib.util.spec_from_file_location("kw_forged_check", path)  # Python's own loader takes the .pyc
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)
    assert plain.value() == 2.0  # the forgery works against a plain import ...
    assert import_file(path, "kw_forged_import").value() == 1.0  # ... not against the judge's


@pytest.mark.timeout(120)
def test_a_forged_pyc_beside_the_problem_does_not_change_the_reference(tmp_path: Path) -> None:
    from kernelwright.judge.evaluate import evaluate

    real = problem("rowsum").read_text()
    fake = real.replace("return x.sum(dim=1)", "return x.sum(dim=1)*2")
    real = real.replace("return x.sum(dim=1)", "return x.sum(dim=1)  ")  # the same length as the forgery
    path = tmp_path / "rowsum.py"
    _forge(path, real, fake)
    wrong = tmp_path / "doubled"
    shutil.copytree(candidate("rowsum_correct"), wrong)
    text = (wrong / "model_new.py").read_text()
    assert "return y" in text
    (wrong / "model_new.py").write_text(text.replace("return y", "return y * 2"))
    verdict = evaluate(path, wrong, correctness_policy(), device="cpu")
    assert verdict.status.value == "incorrect", verdict.log
