"""Static candidate discovery and prebuild: sources found without running model_new.py."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from kernelwright import runtime
from kernelwright.judge import build as b
from kernelwright.judge.candidate import CandidateSyntaxError, discover, prebuild, spec_of
from kernelwright.core.records import BuildPath

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

SINGLE_FILE = '''
import textwrap
import torch
from kernelwright import runtime

HEADER = """
#include <cstdint>
"""
SRC = HEADER + """
extern "C" void add_one(float* x, int64_t n) { for (int64_t i = 0; i < n; ++i) x[i] += 1.0f; }
"""
OTHER = textwrap.dedent("""
    extern "C" void neg(float* x, long n) { for (long i = 0; i < n; ++i) x[i] = -x[i]; }
""").strip()

raise SystemExit("discovery must never run this file")


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = runtime.load(SRC)
        self.neg = runtime.load(OTHER, name="negate", flags=["-DNEG=1"])
        self.dup = runtime.load(SRC)

    def forward(self, x):
        self.lib.add_one(x, x.numel())
        return x
'''


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_single_file_with_string_constants(tmp_path):
    files = discover(write(tmp_path / "cand.py", SINGLE_FILE))
    assert files.build_path == BuildPath.RAW and files.root == tmp_path.resolve()
    assert [(s.name, s.lang, s.origin) for s in files.sources] == [
        ("SRC", "cpp", "inline_string"),
        ("negate", "cpp", "inline_string"),
    ]
    assert files.sources[0].text.startswith("\n#include <cstdint>\n\nextern")
    assert files.sources[1].text.startswith('extern "C" void neg') and files.sources[1].flags == ("-DNEG=1",)


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import kernelwright.runtime as kr", "kr.load"),
        ("from kernelwright.runtime import load", "load"),
        ("from kernelwright.runtime import load as build_it", "build_it"),
        ("import kernelwright.runtime", "kernelwright.runtime.load"),
        ("import kernelwright", "kernelwright.runtime.load"),
    ],
)
def test_import_forms(tmp_path, imports, call):
    text = f'{imports}\nA = "__global__ void k() {{}}" \\\n    " // more"\nlib = {call}(A)\n'
    files = discover(write(tmp_path / "model_new.py", text))
    assert [(s.text, s.lang) for s in files.sources] == [("__global__ void k() {} // more", "cuda")]


def test_unrelated_load_and_non_constant_are_ignored(tmp_path):
    text = """
    import json
    from kernelwright import runtime
    cfg = json.load(open("x"))
    lib = runtime.load(open("k.cu").read())
    """
    files = discover(write(tmp_path / "model_new.py", text))
    assert files.sources == () and files.build_path == BuildPath.NONE


def test_kernels_folder_and_hash(tmp_path):
    root = tmp_path / "cand"
    write(root / "model_new.py", "from pathlib import Path\nfrom kernelwright import runtime\n")
    write(root / "kernels" / "a.cu", '__global__ void k() {}\nextern "C" int launch() { return 0; }\n')
    kernel = write(root / "kernels" / "b.cpp", 'extern "C" void f() {}\n')
    write(root / "kernels" / "common.h", "#pragma once\n")
    write(root / "kernels" / "notes.txt", "not a kernel")
    files = discover(root)
    assert files.model_new == (root / "model_new.py").resolve()
    found = [(s.name, s.lang, s.origin) for s in files.sources]
    assert found == [("a", "cuda", "kernels_dir"), ("b", "cpp", "kernels_dir")]
    assert files.sources[0].headers == (("common.h", "#pragma once\n"),)
    assert files.build_path == BuildPath.RAW and len(files.hash) == 64
    assert discover(root).hash == files.hash
    kernel.write_text('extern "C" void f() { }\n')
    assert discover(root).hash != files.hash
    write(root / "kernels" / "notes.txt", "changed")
    assert len({files.hash, discover(root).hash}) == 2


def test_load_inline_candidate_is_torch_extension(tmp_path):
    text = """
    import torch
    from torch.utils.cpp_extension import load_inline
    mod = load_inline(name="m", cpp_sources="int f();", cuda_sources="", functions=["f"])
    """
    assert discover(write(tmp_path / "model_new.py", text)).build_path == BuildPath.TORCH_EXTENSION
    text2 = "import torch.utils.cpp_extension\nx = torch.utils.cpp_extension.load(name='m', sources=['a.cu'])\n"
    assert discover(write(tmp_path / "other.py", text2)).build_path == BuildPath.TORCH_EXTENSION


def test_bad_paths_and_syntax_errors(tmp_path):
    with pytest.raises(ValueError, match="has no model_new.py"):
        discover(tmp_path)
    with pytest.raises(ValueError, match="must be a .py file"):
        discover(tmp_path / "missing.py")
    with pytest.raises(CandidateSyntaxError) as info:
        discover(write(tmp_path / "model_new.py", "import torch\n\ndef f(:\n    pass\n"))
    assert info.value.line == 3 and isinstance(info.value, ValueError)


@needs_gxx
def test_prebuild_then_runtime_load_hits_the_cache(tmp_path):
    files = discover(write(tmp_path / "model_new.py", SINGLE_FILE))
    results = prebuild(files, timeout_s=60)
    assert [r.ok for r in results] == [True, True] and not any(r.cached for r in results)
    src = files.sources[0]
    assert b.key_for(spec_of(src)) == results[0].key
    namespace: dict = {}
    exec(compile(SINGLE_FILE.split("raise SystemExit")[0], "cand", "exec"), namespace)  # the module constants
    lib = runtime.load(namespace["SRC"])
    assert lib.build.cached and lib.build.key == results[0].key
    neg = runtime.load(namespace["OTHER"], name="anything", flags=["-DNEG=1"])
    assert neg.build.cached and neg.build.key == results[1].key


@needs_gxx
def test_prebuild_kernels_folder_matches_path_load(tmp_path):
    root = tmp_path / "cand"
    write(root / "model_new.py", "")
    write(root / "kernels" / "inc.h", "#define K 4\n")
    path = write(root / "kernels" / "k.cpp", '#include "inc.h"\nextern "C" int k() { return K; }\n')
    (result,) = prebuild(discover(root), timeout_s=60)
    assert result.ok, result.log
    lib = runtime.load(path)
    assert lib.build.cached and lib.build.key == result.key
    with pytest.raises(runtime.KernelError, match="k returned error code 4"):
        lib.k()
