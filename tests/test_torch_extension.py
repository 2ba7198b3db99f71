"""The torch-extension build path (load_inline, KernelBench style) on the CPU backend.

Each build compiles against torch's headers (about 20 s on a 2-core machine), so there are two
tests: a broken extension is compile_error, an honest one is correct and its build is reused.
"""

from __future__ import annotations

import pytest

from conftest import correctness_policy, judge
from kernelwright.core.records import BuildPath, Status

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def test_extension_that_fails_to_build_on_import_is_compile_error():
    v = judge("relu", "relu_ext_compile_error")
    assert v.status is Status.COMPILE_ERROR, v.log
    assert v.candidate["build_path"] == BuildPath.TORCH_EXTENSION.value
    assert "error" in v.log.lower()


def test_honest_extension_is_correct_and_its_build_is_cached():
    first = judge("relu", "relu_ext", correctness_policy())
    assert first.status is Status.CORRECT, first.log
    assert first.candidate["build_path"] == BuildPath.TORCH_EXTENSION.value
    from conftest import candidate, problem
    from kernelwright.judge.evaluate import evaluate

    said: list[str] = []
    second = evaluate(problem("relu"), candidate("relu_ext"), correctness_policy(), device="cpu", progress=said.append)
    assert second.status is Status.CORRECT, second.log
    # item 7 of issue 26: the judge says where the extension's build goes (torch's cache under kernelwright's)
    assert any("building the torch extension" in line and "torch_extensions" in line for line in said), said
    assert second.build_s < first.build_s / 2, (first.build_s, second.build_s)
