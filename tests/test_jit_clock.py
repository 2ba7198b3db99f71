"""Triton's just-in-time work apart from the timed calls (issue 31): the candidate child's clock on
compiles and autotuning (judge.jit_clock), the form its report must have (judge.replies), and the
per-candidate Triton cache (judge.extension.triton_env) that stays writable in the sandbox
(judge.confine.home_env). Compiling needs a GPU: these tests drive the clock with stand-ins for
Triton's compile and benchmark steps; tests/test_triton_gpu.py judges real ones."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton", reason="Triton is not installed: pip install -e '.[test]'")

CLOCK_SCRIPT = r"""
import importlib.util, json, os, sys, time
os.environ.pop("TRITON_INTERPRET", None)  # compiled functions (JITFunction), as a GPU child has
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction
def slow_compile(self, *a, **k):
    time.sleep(0.05)
    return "compiled"
def slow_bench(self, *a, **k):
    time.sleep(0.02)
    return [1.0]
JITFunction._do_compile = slow_compile  # stand-ins for the class's own methods: compiling needs a GPU here
Autotuner._bench = slow_bench
root = sys.argv[1]
spec = importlib.util.spec_from_file_location("kw_candidate", os.path.join(root, "model_new.py"))
mod = importlib.util.module_from_spec(spec); sys.modules["kw_candidate"] = mod; spec.loader.exec_module(mod)
from kernelwright.judge import jit_clock
assert jit_clock.report() is None
watched = jit_clock.watch(root)  # on the functions as Triton made them: no attribute set by the test
mod.plain.compile = lambda *a, **k: "set by Triton at a first launch"  # must not undo the clock
assert mod.plain._do_compile("key") == "compiled" and mod.tuned.fn._do_compile("key") == "compiled"
mod.tuned._bench(config=None); mod.tuned._bench(config=None); mod.tuned._bench(config=None)
print(json.dumps({"watched": watched, "report": jit_clock.report(), "again": jit_clock.watch(root)}))
"""

CANDIDATE = '''
import triton
import triton.language as tl


@triton.jit
def plain(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def tuned(x_ptr, n, BLOCK: tl.constexpr):
    pass
'''


def test_the_clock_times_compiles_and_autotuning_of_the_candidates_triton_functions(tmp_path):
    import json

    (tmp_path / "model_new.py").write_text(textwrap.dedent(CANDIDATE))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", CLOCK_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["watched"] == 3 and out["again"] == 3  # two JITFunctions and the autotuner, each wrapped once
    rep = out["report"]
    assert rep["compiles"] == 2 and rep["compile_s"] >= 0.1 and rep["configs_benchmarked"] == 3 and rep["autotune_s"] >= 0.06, rep


def test_the_clock_watches_nothing_outside_the_candidates_folder(tmp_path):
    from kernelwright.judge import jit_clock

    assert jit_clock.watch(str(tmp_path)) == 0 and jit_clock.report() is None


def test_a_jit_report_of_the_wrong_form_is_a_forged_reply():
    from kernelwright.judge import replies

    assert replies.malformed({"jit": {"compiles": 2, "compile_s": 0.4, "configs_benchmarked": 3, "autotune_s": 1.5}}) == ""
    assert replies.malformed({"jit": {"compiles": "2"}}) == "jit"
    assert replies.malformed({"jit": {"compile_s": float("inf")}}) == "jit"
    assert replies.malformed({"jit": {"compiles": -1}}) == "jit"
    assert replies.malformed({"jit": {f"k{i}": 1 for i in range(13)}}) == "jit"
    assert replies.malformed({"jit": [1, 2]}) == "jit"


def test_a_triton_candidates_cache_is_its_own_and_stays_writable_in_the_sandbox(tmp_path, open_tmp_path, monkeypatch):
    from kernelwright.judge import confine, extension

    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    env = extension.triton_env("ab" * 32)
    other = extension.triton_env("cd" * 32)
    assert env["TRITON_CACHE_DIR"] != other["TRITON_CACHE_DIR"] and env["TRITON_CACHE_AUTOTUNING"] == "1"
    assert env["TRITON_CACHE_DIR"].startswith(env["TORCH_EXTENSIONS_DIR"])  # inside the folder the sandbox makes writable
    config, spec = extension.candidate_config("auto", "cuda", 0, open_tmp_path, (), env)
    assert env["TORCH_EXTENSIONS_DIR"] in spec.write and config.env["TRITON_CACHE_DIR"] == env["TRITON_CACHE_DIR"]
    home = str(tmp_path / "box")
    kept = confine.home_env(dict(env), home, home + "/tmp", keep_under=tuple(spec.write))
    assert kept["TRITON_CACHE_DIR"] == env["TRITON_CACHE_DIR"] and kept["TRITON_HOME"] == home
    # a cache variable naming a folder the process may not write is dropped, as before
    shared = confine.home_env({"TRITON_CACHE_DIR": str(tmp_path / "shared"), "TORCHINDUCTOR_CACHE_DIR": env["TRITON_CACHE_DIR"]}, home,
                              home + "/tmp", keep_under=tuple(spec.write))
    assert "TRITON_CACHE_DIR" not in shared and shared["TORCHINDUCTOR_CACHE_DIR"] == env["TRITON_CACHE_DIR"]
    assert "TRITON_CACHE_DIR" not in confine.home_env(dict(env), home, home + "/tmp")  # nothing kept unless asked


def test_a_verdict_carries_jit_through_its_json():
    from kernelwright.core.records import Status, Verdict

    v = Verdict(status=Status.CORRECT, problem={}, candidate={}, policy={}, jit={"compiles": 1, "compile_s": 0.2, "cache": "candidate"})
    assert Verdict.from_dict(v.to_dict()).jit == v.jit and Verdict.from_dict({**v.to_dict(), "jit": None}).jit is None



def test_one_verdict_at_a_time_holds_a_candidates_triton_cache(tmp_path, monkeypatch):
    """Each confined child takes the cache folder for its own uid: a second verdict of the same files
    while the first runs does without the shared cache (no lock), and gets it once the first let go."""
    import os

    from kernelwright.judge import extension

    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    first = extension.hold_triton_cache("ef" * 32)
    assert first is not None
    assert extension.hold_triton_cache("ef" * 32) is None  # the same files, meanwhile
    other = extension.hold_triton_cache("01" * 32)  # other files: their own folder, their own lock
    assert other is not None
    lock = tmp_path / "cache" / "torch_extensions" / ("ef" * 8 + ".triton.lock")
    assert lock.is_file() and not str(lock).startswith(extension.triton_env("ef" * 32)["TORCH_EXTENSIONS_DIR"] + os.sep)
    os.close(first)
    again = extension.hold_triton_cache("ef" * 32)
    assert again is not None
    os.close(again)
    os.close(other)
