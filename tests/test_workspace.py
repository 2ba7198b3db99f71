"""Workspaces: init, `kernelwright check` (report, exit codes, history), CUDA Agent import/export.

Checks run the real judge on the CPU with the rowsum fixtures (g++ builds, shared build cache);
the workspace objective skips torch.compile and keeps timing short.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import candidate, cli, problem
from kernelwright.agent.objective import Objective
from kernelwright.judge.candidate import discover
from kernelwright.core.records import BuildPath
from kernelwright.problems.loader import ProblemError
from kernelwright.workspace import cuda_agent
from kernelwright.workspace.exits import EXIT_CODES, Exit, for_status
from kernelwright.workspace.layout import find_root, init_workspace, read_config, template
from kernelwright.workspace.session import open_session

pytestmark = pytest.mark.timeout(300)

FAST = Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0)
INIT_FLAGS = ("--device", "cpu", "--no-compile-baseline", "--seeds", "1", "--timing-budget-s", "1")


def _ws(tmp_path: Path, name: str = "ws", cand: str | None = "rowsum_correct") -> Path:
    root = tmp_path / name
    init_workspace(str(problem("rowsum")), root, objective=FAST, device="cpu")
    if cand is not None:
        shutil.copyfile(candidate(cand) / "model_new.py", root / "model_new.py")
    return root


def _check(root: Path, *flags: str, store: Path) -> tuple[int, dict]:
    proc = cli("check", "-C", str(root), "--json", "-q", "--store", str(store), *flags, timeout=200)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


# -- layout ------------------------------------------------------------------------------------------


def test_init_writes_the_layout_with_a_read_only_reference(tmp_path: Path) -> None:
    root = _ws(tmp_path, cand=None)
    config = read_config(root)
    ref = root / "reference" / "rowsum.py"
    assert ref.read_text() == problem("rowsum").read_text()
    assert not ref.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert (root / "kernels").is_dir() and config.id.startswith("ws-") and config.problem_name == "rowsum"
    skill, readme = (root / "SKILL.md").read_text(), (root / "README.md").read_text()
    assert "kernelwright check --quick" in skill and "CPU backend" in skill and "| 4 |" in skill
    assert "kernelwright mcp" in readme and config.id in readme
    text = (root / "model_new.py").read_text()
    assert "class ModelNew(nn.Module)" in text and "def get_inputs" not in text and "class Model(" not in text
    assert find_root(root / "kernels") == root.resolve()


def test_template_renames_the_class_and_super_calls() -> None:
    ref = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, k):\n"
           "        super(Model, self).__init__()\n        self.k = k\n\n    def forward(self, x):\n        return x * self.k\n\n"
           "def get_inputs():\n    return [torch.randn(4)]\n\ndef get_init_inputs():\n    return [2]\n")
    text = template(ref, "scale")
    namespace: dict = {}
    exec(compile(text, "model_new.py", "exec"), namespace)  # a template, not generated code: our own text
    assert "ModelNew" in namespace and "Model" not in namespace and "get_inputs" not in namespace
    assert namespace["ModelNew"](3).k == 3


def test_init_refuses_a_folder_in_use_and_a_bad_problem(tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        init_workspace(str(problem("rowsum")), tmp_path / "used", objective=FAST)
    with pytest.raises(ProblemError):
        init_workspace(str(tmp_path / "missing.py"), tmp_path / "new", objective=FAST)
    proc = cli("workspace", "init", str(problem("rowsum")), str(tmp_path / "used"), *INIT_FLAGS)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    proc = cli("workspace", "init", str(problem("rowsum")), str(tmp_path / "bad"), "--seeds", "0")
    assert proc.returncode == 2 and "seeds must be at least 1" in proc.stderr


def test_check_outside_a_workspace_is_a_usage_error(tmp_path: Path) -> None:
    proc = cli("check", "-C", str(tmp_path), "-q")
    assert proc.returncode == 2 and "not inside a kernelwright workspace" in proc.stderr


def test_exit_codes_cover_every_status() -> None:
    from kernelwright.core.records import Status

    assert {for_status(s.value) for s in Status} <= set(Exit)
    assert set(EXIT_CODES) == {int(e) for e in Exit}
    with pytest.raises(ValueError):
        for_status("fast")


# -- check ---------------------------------------------------------------------------------------------


def test_check_reports_each_outcome_with_its_exit_code_and_keeps_the_history(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    root = _ws(tmp_path, cand=None)
    code, data = _check(root, "--quick", store=store)  # the template: torch compute, refused
    assert code == Exit.REJECTED and data["status"] == "rejected" and data["check"] == 1
    assert data["verdict"]["guards"] and data["kind"] == "check --quick"
    for name, want in (("rowsum_compile_error", Exit.COMPILE_ERROR), ("rowsum_wrong", Exit.INCORRECT),
                       ("rowsum_python_error", Exit.RUNTIME_ERROR)):
        shutil.copyfile(candidate(name) / "model_new.py", root / "model_new.py")
        code, data = _check(root, "--quick", store=store)
        assert code == want, (name, data["status"])
    shutil.copyfile(candidate("rowsum_correct") / "model_new.py", root / "model_new.py")
    code, data = _check(root, store=store)
    assert code == Exit.OK and data["status"] == "correct" and data["verdict"]["runtime_ms"] > 0
    assert data["verdict"]["eager_ms"] > 0 and data["build"]["ok"] and data["check"] == 5
    proc = cli("check", "-C", str(root), "-q", "--store", str(store))  # the readable report
    assert proc.returncode == 0
    assert "kernelwright check · rowsum · cpu" in proc.stdout and "status: correct" in proc.stdout
    assert "best so far: check 5" in proc.stdout and "exit 0:" in proc.stdout
    hist = cli("workspace", "history", "-C", str(root), "--store", str(store), "--json")
    rows = json.loads(hist.stdout)["checks"]
    assert [r["exit_code"] for r in rows] == [6, 3, 4, 5, 0, 0]
    assert [r["kind"] for r in rows][:2] == ["check --quick", "check --quick"] and rows[-1]["kind"] == "check"
    assert all(r["report"] for r in rows) and rows[4]["verdict_id"] and rows[4]["runtime_ms"] > 0
    from kernelwright.store import Store

    with Store.open(store) as db:  # every check's files are kept, the compile error's too
        assert "model_new.py" in db.get_candidate_files(rows[1]["candidate_hash"])
        assert db.get_verdict(rows[4]["verdict_id"]).status.value == "correct"
    table = cli("workspace", "history", "-C", str(root), "--store", str(store), "--show", "2")
    assert table.returncode == 0 and "6 check(s)" in table.stdout and "build failed" in table.stdout


def test_an_edited_reference_stops_every_check(tmp_path: Path) -> None:
    root = _ws(tmp_path)
    ref = root / "reference" / "rowsum.py"
    os.chmod(ref, 0o644)
    ref.write_text(ref.read_text().replace("x.sum(dim=1)", "x.sum(dim=1) * 0"))
    proc = cli("check", "-C", str(root), "--quick", "-q", "--store", str(tmp_path / "s.sqlite"))
    assert proc.returncode == 2 and "changed since the workspace was made" in proc.stderr
    with pytest.raises(ValueError, match="changed since"):
        open_session(root, store=tmp_path / "s.sqlite")


def test_a_loosened_policy_or_a_stray_file_beside_the_reference_stops_the_work(tmp_path: Path) -> None:
    """workspace.json is compared with the workspace's first record in the store: allowing torch
    compute there after the fact (which would pass the template) is refused, as is a file that
    could stand in for a module beside the reference; the history stays readable."""
    store = tmp_path / "s.sqlite"
    root = _ws(tmp_path, cand=None)
    code, _ = _check(root, "--quick", store=store)
    assert code == Exit.REJECTED
    cfg_path = root / ".kernelwright" / "workspace.json"
    original = cfg_path.read_text()
    cfg = json.loads(original)
    cfg["objective"]["allow_torch_compute"] = True
    cfg_path.write_text(json.dumps(cfg))
    proc = cli("check", "-C", str(root), "--quick", "-q", "--store", str(store))
    assert proc.returncode == 2 and "no longer matches" in proc.stderr and "allow_torch_compute False -> True" in proc.stderr
    hist = cli("workspace", "history", "-C", str(root), "--store", str(store), "--json")
    assert hist.returncode == 0 and len(json.loads(hist.stdout)["checks"]) == 1
    cfg_path.write_text(original)
    (root / "reference" / "torch_helpers.py").write_text("x = 1\n")
    proc = cli("check", "-C", str(root), "--quick", "-q", "--store", str(store))
    assert proc.returncode == 2 and "files other than the reference" in proc.stderr


def test_the_best_check_skips_sanitizer_failures(tmp_path: Path) -> None:
    from kernelwright.store import Store

    with Store.open(tmp_path / "s.sqlite") as db:
        db.register_workspace("ws-00000001", root=tmp_path, problem_hash="h", problem_name="p", config={})
        db.add_check("ws-00000001", kind="check", source="cli", status="correct", report="r", payload={}, exit_code=0,
                     runtime_ms=2.0, speedup_vs_best=1.5)
        db.add_check("ws-00000001", kind="check --final", source="cli", status="correct", report="r", payload={}, exit_code=7,
                     runtime_ms=1.0, speedup_vs_best=3.0)
        assert db.best_check("ws-00000001")["seq"] == 1
        db.register_workspace("ws-00000001", root=tmp_path / "moved", problem_hash="other", problem_name="p", config={"x": 1})
        row = db.get_workspace("ws-00000001")
        assert row["root"] == str(tmp_path / "moved") and row["problem_hash"] == "h" and row["config"] == {}  # pinned


def test_session_tools_keep_their_calls_and_refuse_the_protected_files(tmp_path: Path) -> None:
    root = _ws(tmp_path)
    session = open_session(root, device="cpu", store=tmp_path / "s.sqlite")
    assert {s.name for s in session.specs} >= {"compile", "verify", "profile", "submit", "read_file", "write_file", "list_files"}
    refused = session.call("write_file", {"path": "reference/rowsum.py", "content": "x"}, source="test")
    assert not refused.ok and "read-only" in refused.text
    assert not session.call("write_file", {"path": "SKILL.md", "content": "x"}, source="test").ok
    assert not session.call("write_file", {"path": "skill.md", "content": "x"}, source="test").ok  # case-insensitive file systems
    assert not session.call("write_file", {"path": "Reference/rowsum.py", "content": "x"}, source="test").ok
    assert session.call("compile", {}, source="test").ok
    verify = session.call("verify", {}, source="test")
    assert verify.ok and verify.data["status"] == "correct"
    names = session.call("list_files", {}, source="test").data["files"]
    assert "model_new.py" in names and "reference/rowsum.py" in names
    kinds = [(r["kind"], r["source"], r["exit_code"]) for r in session.history()]
    assert kinds == [("compile", "test", 0), ("verify", "test", 0)]  # file tools are not checks


# -- CUDA Agent workdirs -------------------------------------------------------------------------------


# The kernel file is plain C++ and only the binding includes torch: torch/extension.h parses in
# about 25 s on the 2-core box, torch/types.h in 11 s (g++ -fsyntax-only). The imported workdir's
# build took 45 s of CPU with one such file, 59 s with the kernel's on torch/types.h (42-43 s wall
# alone either way: ninja builds the two files at once).
BINDING = """#include <torch/extension.h>
#include "rowsum.h"
torch::Tensor rowsum_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty({xc.size(0)}, xc.options());
    rowsum_rows(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1));
    return y;
}
PYBIND11_MODULE(cuda_extension, m) { m.def("rowsum_forward", &rowsum_forward); }
"""

HEADER = """#pragma once
#include <cstdint>
void rowsum_rows(const float* s, float* d, int64_t rows, int64_t n);
"""

KERNEL = """#include "rowsum.h"
void rowsum_rows(const float* s, float* d, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) { double acc = 0; for (int64_t c = 0; c < n; ++c) acc += s[r * n + c]; d[r] = (float)acc; }
}
"""

WORKDIR_MODEL_NEW = """import torch
import cuda_extension


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return cuda_extension.rowsum_forward(x)
"""


def _workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "agent_workdir"
    (wd / "kernels").mkdir(parents=True)
    (wd / "utils").mkdir()
    (wd / "build").mkdir()
    shutil.copyfile(problem("rowsum"), wd / "model.py")
    (wd / "model_new.py").write_text(WORKDIR_MODEL_NEW)
    (wd / "binding.cpp").write_text(BINDING)
    (wd / "kernels" / "rowsum.cpp").write_text(KERNEL)
    (wd / "kernels" / "rowsum.h").write_text(HEADER)
    (wd / "utils" / "compile.py").write_text("print('theirs')\n")
    (wd / "build" / "cuda_extension.so").write_bytes(b"\0")
    (wd / "SKILL.md").write_text("their skill\n")
    return wd


def test_cuda_agent_workdir_round_trip(tmp_path: Path) -> None:
    wd = _workdir(tmp_path)
    config = cuda_agent.import_workdir(wd, tmp_path / "ws", objective=FAST, device="cpu")
    root = tmp_path / "ws"
    assert config.problem_name == "agent_workdir" and "CUDA Agent workdir" in config.origin
    assert (root / "reference" / "agent_workdir.py").read_text() == problem("rowsum").read_text()
    assert (root / "binding.cpp").read_text() == BINDING and (root / "kernels" / "rowsum.cpp").read_text() == KERNEL
    assert (root / "kernels" / "rowsum.h").read_text() == HEADER
    assert not (root / "utils").exists() and not (root / "build").exists()
    assert "their skill" not in (root / "SKILL.md").read_text()
    main = (root / "model_new.py").read_text()
    assert main.startswith(cuda_agent.PREAMBLE_START) and main.endswith(WORKDIR_MODEL_NEW)
    assert discover(root / "model_new.py").build_path == BuildPath.TORCH_EXTENSION
    out = cuda_agent.export_workdir(root, tmp_path / "back")
    assert (out / "model_new.py").read_text() == WORKDIR_MODEL_NEW
    assert (out / "model.py").read_text() == problem("rowsum").read_text()
    assert (out / "binding.cpp").read_text() == BINDING and (out / "kernels" / "rowsum.cpp").read_text() == KERNEL
    assert (out / "kernels" / "rowsum.h").read_text() == HEADER
    assert "kernelwright check" in (out / "SKILL.md").read_text()
    again = cuda_agent.import_workdir(out, tmp_path / "ws2", objective=FAST, device="cpu")
    assert again.problem_hash == config.problem_hash
    assert (tmp_path / "ws2" / "model_new.py").read_text() == main
    native = tmp_path / "native"  # a kernelwright-native candidate goes out and comes back as it was
    init_workspace(str(problem("rowsum")), native, objective=FAST, device="cpu")
    shutil.copyfile(candidate("rowsum_correct") / "model_new.py", native / "model_new.py")
    cuda_agent.export_workdir(native, tmp_path / "native_out")
    cuda_agent.import_workdir(tmp_path / "native_out", tmp_path / "native_back", objective=FAST, device="cpu")
    assert (tmp_path / "native_back" / "model_new.py").read_text() == (native / "model_new.py").read_text()
    with pytest.raises(ValueError, match="not a CUDA Agent workdir"):
        cuda_agent.import_workdir(tmp_path / "ws", tmp_path / "ws3", objective=FAST)
    with pytest.raises(ValueError, match="not an empty folder"):
        cuda_agent.export_workdir(root, out)


@pytest.mark.parametrize("kind, built", [("compile", False), ("timeout", False), ("runtime", True), ("died", True)])
def test_a_torch_extension_failing_after_its_build_is_left_to_the_judge(tmp_path: Path, monkeypatch, kind: str, built: bool) -> None:
    """compile(): a compiler error or a build past its time is a failed build; a candidate that
    raises or dies when imported or constructed built fine, and the judgement says what went wrong."""
    from kernelwright.agent.judging import Judge
    from kernelwright.judge import workers
    from kernelwright.problems.loader import load_problem

    def fail(self, cmd, args, timeout_s=None):
        raise workers.ChildError(kind, f"setup failed ({kind})", "tail", "candidate")

    monkeypatch.setattr(workers.Child, "call", fail)
    wd = _workdir(tmp_path)
    cuda_agent.import_workdir(wd, tmp_path / "ws", objective=FAST, device="cpu")
    judge = Judge(load_problem(tmp_path / "ws" / "reference" / "agent_workdir.py"), FAST, device="cpu", store=None, record=False)
    report = judge.compile(tmp_path / "ws" / "model_new.py")
    assert report.ok is built and report.build_path == "torch_extension" and kind in report.log


@pytest.mark.slow
def test_an_imported_workdir_builds_and_verifies_through_check(tmp_path: Path) -> None:
    """The imported candidate's extension (binding.cpp + kernels/) is built by the judge's torch
    extension path and judged correct; about 30-60 s of C++ build with torch headers on 2 cores."""
    wd = _workdir(tmp_path)
    proc = cli("workspace", "import", str(wd), str(tmp_path / "ws"), *INIT_FLAGS)
    assert proc.returncode == 0, proc.stderr
    code, data = _check(tmp_path / "ws", "--quick", store=tmp_path / "s.sqlite")
    assert code == Exit.OK and data["status"] == "correct", data.get("verdict", {}).get("log")
    assert data["build"]["build_path"] == "torch_extension"


def test_ncu_takes_a_torch_extension_from_the_judges_build_folder(tmp_path: Path, monkeypatch) -> None:
    """ncu runs the candidate's forward in a process of its own: a torch extension must load from the
    folder the judge built it in (keyed by content hash), not be built again under the lock."""
    from kernelwright.agent.profile import _extension_env
    from kernelwright.judge.build import cache_dir
    from kernelwright.judge.candidate import discover

    ext = candidate("relu_ext")
    want = cache_dir() / "torch_extensions" / discover(ext).hash[:16]
    assert _extension_env(ext) == {"TORCH_EXTENSIONS_DIR": str(want)}
    assert _extension_env(candidate("rowsum_correct")) == {}  # raw kernels: nothing to point at
    assert _extension_env(candidate("rowsum_syntax_error")) == {}
