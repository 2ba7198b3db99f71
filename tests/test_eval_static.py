"""A newcomer's first mistakes (issue 26): a syntax error, an empty file, a wrong constructor or
forward signature are answered from the source alone (judge.precheck) before any child process
starts, with the status the children would give; `eval` shows the status and its reason first,
naming the user's own file; `--exit-status` gives check's codes; two single-file candidates of one
folder never share an id."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import cli, problem
from kernelwright.judge import evaluate as ev
from kernelwright.judge import forkpool, sandbox_check
from kernelwright.judge.policy import Policy
from kernelwright.core.records import Status
from kernelwright.judge.snapshot import candidate_files, files_hash

pytestmark = pytest.mark.timeout(60)

ROWSUM = problem("rowsum")  # Model() and forward(self, x); get_inputs() returns one tensor
SYNTAX = "import torch\ndef f(:\n"
CTOR = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, a, b):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=1)
"""
FORWARD = CTOR.replace("def __init__(self, a, b)", "def __init__(self)").replace("def forward(self, x)", "def forward(self, x, y)")


def precheck(*args, **kwargs):
    from kernelwright.judge.precheck import precheck as read  # here: the rest of the file runs on code without it

    return read(*args, **kwargs)


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(text))
    return folder / name


@pytest.fixture
def no_children(monkeypatch):
    """Fail the test if the evaluation starts the fork server or any child."""
    def refuse(*_a, **_k):
        raise AssertionError("a child process was started for a verdict the source settles")

    monkeypatch.setattr(forkpool, "warm_up", refuse)
    monkeypatch.setattr(ev.Flow, "run", refuse)


# ---- the static read, before any child -----------------------------------------------------------


def test_a_syntax_error_is_compile_error_naming_the_users_file_and_line_without_a_child(tmp_path, no_children):
    cand = write(tmp_path / "mine", "syntax.py", SYNTAX)
    v = ev.evaluate(ROWSUM, cand, Policy(time_candidate=False), device="cpu")
    assert v.status is Status.COMPILE_ERROR
    assert f"{cand.parent}/syntax.py:2:" in v.log and "kw-eval-" not in v.log, v.log
    assert v.sandbox["candidate_started"] is False and sandbox_check.plainly(v.sandbox) == ""


def test_an_empty_file_is_compile_error_without_a_child(tmp_path, no_children):
    cand = write(tmp_path, "empty.py", "")
    write(tmp_path, "syntax.py", SYNTAX)  # a sibling that does not parse cannot define anything
    v = ev.evaluate(ROWSUM, cand, Policy(time_candidate=False), device="cpu")
    assert v.status is Status.COMPILE_ERROR and "empty.py" in v.log and "defines no class ModelNew" in v.log, v.log


def test_a_constructor_the_init_inputs_cannot_fit_is_runtime_error_without_a_child(tmp_path, no_children):
    v = ev.evaluate(ROWSUM, write(tmp_path, "ctor.py", CTOR), Policy(time_candidate=False), device="cpu")
    assert v.status is Status.RUNTIME_ERROR, v.log
    assert f"{tmp_path}/ctor.py:7: ModelNew.__init__(self, a, b) cannot take the 0 positional argument(s)" in v.log, v.log
    assert "Traceback" not in v.log and "kernelwright/judge" not in v.log


def test_a_forward_the_inputs_cannot_fit_is_runtime_error_without_a_child(tmp_path, no_children):
    v = ev.evaluate(ROWSUM, write(tmp_path, "fwd.py", FORWARD), Policy(time_candidate=False), device="cpu")
    assert v.status is Status.RUNTIME_ERROR and "fwd.py:10: ModelNew.forward(self, x, y)" in v.log, v.log


TWO_INPUTS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, scale=1.0):
        super().__init__()

    def forward(self, a, b):
        return a @ b


def get_inputs():
    a = torch.randn(4, 4)
    return [a, torch.randn(4, 4)]


def get_init_inputs():
    return [4]
"""


@pytest.mark.parametrize("init, forward, decided", [
    ("self, dim", "self, a, b", None),
    ("self, dim, scale=2.0", "self, *xs", None),
    ("self, *args, **kwargs", "self, a, b, c=None", None),
    ("self", "self, a, b", Status.RUNTIME_ERROR),  # get_init_inputs() gives one
    ("self, dim, *, scale", "self, a, b", Status.RUNTIME_ERROR),  # keyword-only without a default
    ("self, dim", "self, a", Status.RUNTIME_ERROR),
    ("self, dim", "a, b", Status.RUNTIME_ERROR),  # self takes a, b is missing
])
def test_signatures_against_the_references(tmp_path, init, forward, decided):
    cand = write(tmp_path, "model_new.py", f"""
        import torch.nn as nn

        class ModelNew(nn.Module):
            def __init__({init}):
                super().__init__()

            def forward({forward}):
                return None
        """)
    early = precheck(textwrap.dedent(TWO_INPUTS), cand)
    assert (early.status if early else None) == decided, early


@pytest.mark.parametrize("source", [
    "from helpers import *\n",  # a star import may bring ModelNew
    "globals()['Model' + 'New'] = type('X', (), {})\n",
    "exec(open('other.txt').read())\n",
    "import sys\nsetattr(sys.modules[__name__], 'M' + 'odelNew', object)\n",
    "from helpers import ModelNew\n",
    "def __getattr__(name):\n    return object\n",
    "import torch\nraise RuntimeError('crashes on import')\n",  # the import fails first: runtime_error, not compile_error
    "import helpers\n",  # a sibling's code runs at import
    "import torch\ndef f(x: torch.Tensr):\n    pass\n",  # an annotation evaluated at import may fail
])
def test_what_only_running_can_tell_is_left_to_the_children(tmp_path, source):
    cand = write(tmp_path, "model_new.py", source)
    assert precheck(ROWSUM.read_text(), cand) is None


@pytest.mark.parametrize("body", [
    "@some_decorator\nclass ModelNew(nn.Module):\n    def __init__(self, a):\n        super().__init__()\n",
    "class ModelNew(Base):\n    def __init__(self, a):\n        super().__init__()\n",  # Base from elsewhere
    "class ModelNew(nn.Module):\n    def __new__(cls, *a):\n        return object.__new__(cls)\n    def __init__(self, a):\n        pass\n",
    "class ModelNew(nn.Module):\n    def __call__(self, *a):\n        return 0\n    def forward(self):\n        return 0\n",
    "class ModelNew(nn.Module):\n    if True:\n        def __init__(self, a):\n            pass\n",
    "class ModelNew(nn.Module):\n    @staticmethod\n    def forward():\n        return 0\n",
])
def test_signatures_decided_elsewhere_are_left_to_the_children(tmp_path, body):
    cand = write(tmp_path, "model_new.py", "import torch.nn as nn\n" + body)
    assert precheck(ROWSUM.read_text(), cand) is None


def test_an_inherited_module_init_takes_no_arguments(tmp_path):
    cand = write(tmp_path, "model_new.py", "from torch import nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")
    assert precheck(ROWSUM.read_text(), cand) is None
    early = precheck(textwrap.dedent(TWO_INPUTS), cand)
    assert early is not None and early.status is Status.RUNTIME_ERROR and "torch.nn.Module's" in early.reason


def test_a_module_that_only_binds_names_is_read_whole(tmp_path):
    """Constants, annotated plain classes and functions: nothing can happen at import, so a missing
    ModelNew is the children's compile_error, whatever strings the file holds."""
    cand = write(tmp_path, "model_new.py", '''
        """A docstring naming ModelNew."""
        from __future__ import annotations
        import torch
        from torch import nn

        NAME = "ModelNew"


        class ModelNEW(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x
        ''')
    early = precheck(ROWSUM.read_text(), cand)
    assert early is not None and early.status is Status.COMPILE_ERROR and "classes it defines: ModelNEW" in early.reason


RAW = '''
import torch
import torch.nn as nn
from kernelwright import runtime

SRC = 'extern "C" int f(const float* x) { return 0; }'
lib = runtime.load(SRC, lang="cpp")


class ModelNew(nn.Module):
    def __init__(self, a):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
'''


def test_a_raw_candidates_signature_is_read_once_its_sources_are_built(tmp_path):
    cand = write(tmp_path, "model_new.py", RAW)
    assert precheck(ROWSUM.read_text(), cand) is None  # the load builds at import: a failed build is compile_error
    early = precheck(ROWSUM.read_text(), cand, built=True)
    assert early is not None and early.status is Status.RUNTIME_ERROR and "model_new.py:11: ModelNew.__init__(self, a)" in early.reason


def test_a_forward_is_read_only_when_construction_just_binds_attributes(tmp_path):
    busy = FORWARD.replace("super().__init__()", "super().__init__()\n        self.w = nn.Parameter(torch.ones(3))")
    assert precheck(ROWSUM.read_text(), write(tmp_path, "busy.py", busy)) is None
    plain = FORWARD.replace("super().__init__()", "super().__init__()\n        self.scale = 2.0")
    assert precheck(ROWSUM.read_text(), write(tmp_path, "plain.py", plain)).status is Status.RUNTIME_ERROR


# ---- the command line ----------------------------------------------------------------------------


def test_eval_says_status_and_reason_first_naming_the_users_file_in_under_two_seconds(tmp_path):
    write(tmp_path, "syntax.py", SYNTAX)
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "kernelwright.cli", "eval", str(ROWSUM), "syntax.py", "--no-store", "-q"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path, env=_env())
    elapsed = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "compile_error: syntax error in the candidate: syntax.py:2: invalid syntax", res.stdout
    assert "kw-eval-" not in res.stdout and "WITHOUT" not in res.stdout, res.stdout
    assert elapsed < 2 * 2, f"{elapsed:.1f} s"  # about 1 s here; doubled for a loaded CI box (5 s before the static read)


def test_exit_status_gives_checks_codes_and_plain_eval_keeps_0(tmp_path):
    write(tmp_path, "ctor.py", CTOR)
    plain = cli("eval", str(ROWSUM), str(tmp_path / "ctor.py"), "--no-store", "-q")
    coded = cli("eval", str(ROWSUM), str(tmp_path / "ctor.py"), "--no-store", "-q", "--exit-status", "--json")
    first = plain.stdout.splitlines()[0]
    assert plain.returncode == 0 and first.startswith("runtime_error: ") and first.endswith("Model.__init__ takes (self)"), plain.stdout
    assert coded.returncode == 5, coded.stderr
    helptext = cli("eval", "--help").stdout
    assert "--exit-status" in helptext and "exit codes:" in helptext and "3  the kernels or model_new.py did not build" in helptext


def _env() -> dict[str, str]:
    import os

    return dict(os.environ, COLUMNS="200", NO_COLOR="1")


# ---- what else a newcomer met ------------------------------------------------------------------


def test_two_single_file_candidates_of_one_folder_have_different_ids(tmp_path):
    a, b = write(tmp_path, "a.py", CTOR), write(tmp_path, "b.py", FORWARD)
    assert candidate_files(a).keys() == candidate_files(b).keys()  # the same files; only the main one differs
    assert files_hash(a) != files_hash(b)


def test_a_model_new_candidates_id_is_what_it_was(tmp_path):
    """Stored, exported and workspace hashes are of model_new.py candidates: their formula is unchanged."""
    folder = tmp_path / "cand"
    write(folder, "model_new.py", CTOR)
    write(folder / "kernels", "k.cpp", "int f() { return 0; }\n")
    before = hashlib.sha256()
    for name in ("kernels/k.cpp", "model_new.py"):
        before.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    assert files_hash(folder) == files_hash(folder / "model_new.py") == before.hexdigest()


def test_the_sandbox_line_is_only_for_verdicts_that_ran_candidate_code():
    assert sandbox_check.plainly(sandbox_check.not_started("auto")) == ""
    assert "WITHOUT the sandbox" in sandbox_check.plainly(None)  # a verdict from before the sandbox
    assert "WITHOUT the full sandbox" in sandbox_check.plainly({"mode": "auto", "layers": ["env"], "full": False, "missing": ["landlock"]})


def test_a_candidates_error_shows_its_own_frames_not_the_judges(tmp_path, monkeypatch):
    from kernelwright.judge import child

    code = write(tmp_path / "cand", "model_new.py", "def boom(n):\n    raise ValueError(f'refuses {n}')\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("kw_test_cand", code)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(child, "CODE_ROOT", [str(code.parent) + "/"])
    try:
        module.boom(3)  # called from this file: a frame of "the judge"
    except ValueError as exc:
        text = child.describe(exc)
    assert text.startswith("ValueError: refuses 3") and f'"{code}", line 2, in boom' in text, text
    assert "test_eval_static.py" not in text


def test_no_gpu_driver_at_all_is_no_gpu_without_asking_torch(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(ev, "NVIDIA_PROC", str(tmp_path / "proc"))
    monkeypatch.setattr(ev, "NVIDIA_CTL", str(tmp_path / "nvidiactl"))
    monkeypatch.setattr(ev, "OTHER_GPU_NODES", (str(tmp_path / "dxg"),))
    assert ev.gpu_seen_by_driver() is False
    (tmp_path / "dxg").touch()  # WSL: only torch can tell
    assert ev.gpu_seen_by_driver() is None


def test_torch_versions_are_read_without_importing_torch():
    code = "import sys\nfrom kernelwright.judge.verdicts import torch_versions\nprint(torch_versions()[0], 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    version, imported = out.stdout.split()
    import torch

    assert version == torch.__version__ and imported == "False", out.stderr


def test_a_served_verdict_names_the_callers_folder(tmp_path, no_children):
    """The service judges its own copy; the client sends how the user named the folder."""
    import base64

    from kernelwright.client.service import validate

    cand = write(tmp_path / "job" / "candidate", "model_new.py", SYNTAX)
    v = ev.evaluate(ROWSUM, cand.parent, Policy(time_candidate=False), device="cpu", shown_as="work/mine")
    assert "work/mine/model_new.py:2:" in v.log and str(tmp_path) not in v.log, v.log
    request = {"problem": {"name": "rowsum", "source_b64": base64.b64encode(ROWSUM.read_bytes()).decode()},
               "candidate": {"files": {"model_new.py": SYNTAX}, "shown_as": "work/mine"}}
    validate(request)
    request["candidate"]["shown_as"] = 3
    with pytest.raises(ValueError, match="shown_as"):
        validate(request)


# ---- a review's findings: hostile sources cannot hang the read, abstain, or be misread ------------


def test_source_too_deep_for_the_parser_is_compile_error_not_the_judges_failure(tmp_path, no_children):
    """An infra_error leaves a verdict out of a reward: a candidate must not earn one by writing a
    line Python's own compiler cannot take (RecursionError in the parser)."""
    cand = write(tmp_path / "deep", "model_new.py", "import torch\nX = " + "+".join(["1"] * 200_000) + "\n" + CTOR)
    v = ev.evaluate(ROWSUM, cand.parent, Policy(time_candidate=False), device="cpu")
    assert v.status is Status.COMPILE_ERROR and "too deeply nested" in v.log, v.log


def test_the_read_stays_cheap_for_thousands_of_classes(tmp_path):
    body = "from torch.nn import Module\n" + "".join(f"class C{i}(Module):\n    pass\n" for i in range(8000))
    t0 = time.monotonic()
    assert precheck(ROWSUM.read_text(), write(tmp_path, "many.py", body)) is None  # too long to read: the children's question
    assert time.monotonic() - t0 < 2  # 8.4 s before the cap, growing with the square of the classes
    few = precheck(ROWSUM.read_text(), write(tmp_path, "few.py", "from torch.nn import Module\n" + "".join(
        f"class C{i}(Module):\n    pass\n" for i in range(12))))
    assert few is not None and "C0, C1, C2, C3, C4, and 7 more" in few.reason, few


@pytest.mark.parametrize("hook", [
    "    def __setattr__(self, name, value):\n        super().__setattr__(name, value)\n",
    "    __call__ = None\n",
])
def test_a_class_with_hooks_is_the_childrens_question(tmp_path, hook):
    """__setattr__ runs on `self.k = k` (it can register a forward pre-hook that changes the call),
    and other dunders change construction or calls: the read leaves such a module alone."""
    source = FORWARD.replace("class ModelNew(nn.Module):\n", "class ModelNew(nn.Module):\n" + hook)
    assert precheck(ROWSUM.read_text(), write(tmp_path, "hook.py", source)) is None


def test_a_base_that_defines_init_subclass_is_the_childrens_question(tmp_path):
    source = """
import torch.nn as nn


class Base(nn.Module):
    def __init_subclass__(cls, **kw):
        pass


class Impl(Base):
    def forward(self, x):
        return x
"""
    assert precheck(ROWSUM.read_text(), write(tmp_path, "sub.py", source)) is None


def test_file_contents_holding_nul_bytes_cannot_make_two_candidates_share_an_id(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    write(one, "model_new.py", "M")
    write(one, "a.txt", "X")
    write(one, "b.txt", "Y")
    write(two, "model_new.py", "M")
    write(two, "a.txt", "X\0b.txt\0Y")
    assert files_hash(one) != files_hash(two)


def test_the_verdict_records_the_timing_budget_in_force(tmp_path, no_children):
    v = ev.evaluate(ROWSUM, write(tmp_path / "mine", "syntax.py", SYNTAX), Policy(), device="cpu")
    assert v.policy["timing"]["budget_s"] == 5.0  # the CPU's default, where the policy named none
