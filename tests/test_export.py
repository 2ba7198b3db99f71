"""The drop-in package: files as judged (same hash), a loader that builds the kernels from any working
directory, strict JSON, refusal to overwrite a user's folder, replacement of an earlier export, review."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelwright.agent.export import ExportInfo, export_package, exported_candidate_hash, is_export, write_review
from kernelwright.core.records import Guard, Status, Step, Verdict
from kernelwright.judge.snapshot import files_hash

pytestmark = pytest.mark.timeout(120)

SRC = Path(__file__).resolve().parents[1] / "src"

MODEL_NEW = textwrap.dedent('''\
    """Adds one (inline C++ string), then doubles (kernels/twice.cpp)."""

    import pathlib

    import torch
    import torch.nn as nn

    from kernelwright import runtime

    CPP_SRC = r"""
    extern "C" int add_one(const float* x, float* y, long n) {
        for (long i = 0; i < n; ++i) y[i] = x[i] + 1.0f;
        return 0;
    }
    """

    add = runtime.load(CPP_SRC)
    twice = runtime.load(pathlib.Path(__file__).parent / "kernels" / "twice.cpp")


    class ModelNew(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.contiguous()
            y = torch.empty_like(x)
            add.add_one(x, y, x.numel())
            z = torch.empty_like(y)
            twice.twice(y, z, y.numel())
            return z
    ''')

TWICE_CPP = 'extern "C" int twice(const float* x, float* y, long n) {\n    for (long i = 0; i < n; ++i) y[i] = 2.0f * x[i];\n    return 0;\n}\n'

FILES = {"model_new.py": MODEL_NEW, "kernels/twice.cpp": TWICE_CPP}


def judged_hash(tmp_path: Path, files: dict[str, str]) -> str:
    """The hash the judge computes for these files (a candidate folder holding exactly them)."""
    folder = tmp_path / f"judged-{len(list(tmp_path.iterdir()))}"
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return files_hash(folder)


def make_info(tmp_path: Path, files: dict[str, str] = FILES, **changes) -> ExportInfo:
    chash = judged_hash(tmp_path, files)
    verdict = Verdict(
        status=Status.CORRECT, problem={"name": "addtwice", "hash": "ph123456789abc"},
        candidate={"hash": chash, "build_path": "raw"}, policy={"precision": "fp32"}, runtime_ms=0.5, eager_ms=1.0,
        compile_ms=0.8, speedup_vs_eager=2.0, speedup_vs_compile=1.6, speedup_vs_best=1.6, max_abs_error=0.0,
        guards=(Guard("physics_floor", False, ""),), steps=(Step("l2_flush", False, "cpu backend"),),
    ).to_dict()
    fields = dict(
        run_id="run-1a2b3c4d", problem_name="addtwice", problem_hash="ph123456789abc", problem_spec="problems/addtwice.py",
        model="openai:gpt-x", strategy="refine", objective={"target_speedup": 1.5, "strategy": "refine"},
        candidate_hash=chash, files=dict(files), verdict={**verdict, "max_rel_error": float("nan")},
        search_verdict={**verdict, "runtime_ms": 0.45, "speedup_vs_best": 1.78},
        history=({"seq": 3, "branch": "t0", "status": "incorrect", "runtime_ms": None, "speedup_vs_best": None,
                  "candidate_hash": "0" * 64},
                 {"seq": 7, "branch": "t1", "status": "correct", "runtime_ms": 0.45, "speedup_vs_best": 1.78,
                  "candidate_hash": chash}),
        totals={"steps": 12, "prompt_tokens": 5000, "completion_tokens": 900, "cost_usd": 0.042},
        provenance={"device": "cpu", "commit": "abc1234", "backend": "openai", "base_url": None, "replayed": True},
    )
    fields.update(changes)
    return ExportInfo(**fields)


def _strict(path: Path) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{path.name} holds {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_export_writes_the_package(tmp_path: Path) -> None:
    info = make_info(tmp_path)
    out = tmp_path / "out" / "kwexport"
    written = export_package(out, info)
    assert [p.relative_to(out).as_posix() for p in written] == sorted(
        ["SUMMARY.md", "__init__.py", "kernels/twice.cpp", "model_new.py", "run.json", "verdict.json"])
    for name, text in FILES.items():
        assert (out / name).read_text() == text
    verdict = _strict(out / "verdict.json")
    assert verdict["status"] == "correct" and verdict["max_rel_error"] is None
    record = _strict(out / "run.json")
    assert record["run_id"] == "run-1a2b3c4d" and record["candidate_hash"] == info.candidate_hash
    assert record["approved"] is None and record["review_note"] == ""
    assert record["candidate_files"] == ["kernels/twice.cpp", "model_new.py"]
    assert record["objective"]["target_speedup"] == 1.5 and record["totals"]["cost_usd"] == 0.042
    assert record["provenance"]["commit"] == "abc1234" and record["provenance"]["replayed"] is True
    assert record["provenance"]["kernelwright"] and "base_url" in record["provenance"]
    assert is_export(out)
    assert not [p for p in out.parent.iterdir() if p.name != "kwexport"]  # no temporary folder left behind


def test_shipped_files_hash_to_the_judged_hash(tmp_path: Path) -> None:
    info = make_info(tmp_path)
    out = tmp_path / "kwexport"
    export_package(out, info)
    assert exported_candidate_hash(out) == info.candidate_hash
    # files_hash over the export folder itself also counts the files the export adds
    # (snapshot.candidate_files skips only hidden entries and __pycache__), so copy the candidate out first.
    copy = tmp_path / "copy"
    for name in _strict(out / "run.json")["candidate_files"]:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((out / name).read_bytes())
    assert files_hash(copy) == info.candidate_hash
    assert files_hash(out) != info.candidate_hash


def test_summary_reads_well(tmp_path: Path) -> None:
    out = tmp_path / "kwexport"
    export_package(out, make_info(tmp_path))
    text = (out / "SUMMARY.md").read_text()
    for needle in ("# addtwice: kernelwright run run-1a2b3c4d", "Review: not reviewed", "openai:gpt-x", "refine",
                   "- target_speedup: 1.5", "## Final verdict: correct", "| candidate | 0.5 ms | - |",
                   "| eager | 1 ms | 2.000x |", "| torch.compile | 0.8 ms | 1.600x |", "| the faster baseline | - | 1.600x |",
                   "max abs error 0, max rel error -.", "Guards that fired: none", "- l2_flush: cpu backend",
                   "Won with: correct; candidate 0.45 ms", "| 7 | t1 | correct | 0.45 ms | 1.780x |",
                   "12 steps, 5000 prompt + 900 completion tokens, cost $0.0420", "- commit: abc1234", "- replayed: True"):
        assert needle in text, needle


def test_package_builds_and_imports_from_another_directory(tmp_path: Path) -> None:
    out = tmp_path / "exports" / "kwexport"
    export_package(out, make_info(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = textwrap.dedent(f"""
        import importlib.util, json, os, sys
        import torch
        sys.path.insert(0, {str(out.parent)!r})
        from kwexport import ModelNew, CANDIDATE_HASH, RUN_ID
        x = torch.arange(4, dtype=torch.float32)
        result = {{"package": ModelNew()(x).tolist(), "hash": CANDIDATE_HASH, "run": RUN_ID,
                   "folder_left_on_path": {str(out)!r} in sys.path}}
        spec = importlib.util.spec_from_file_location("standalone", {str(out / "model_new.py")!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        result["file"] = module.ModelNew()(x).tolist()
        print(json.dumps(result))
        """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["package"] == [2.0, 4.0, 6.0, 8.0] and result["file"] == [2.0, 4.0, 6.0, 8.0]
    assert result["hash"] == _strict(out / "run.json")["candidate_hash"] and result["run"] == "run-1a2b3c4d"
    assert result["folder_left_on_path"] is False
    assert exported_candidate_hash(out) == result["hash"]  # importing (and its __pycache__) changed nothing


def test_refuses_a_foreign_folder(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a kernelwright export.*nothing was deleted"):
        export_package(target, make_info(tmp_path))
    assert (target / "notes.txt").read_text() == "keep me" and sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    (target / "run.json").write_text('{"something": "else"}')  # a run.json of another tool is not ours
    with pytest.raises(ValueError, match="not a kernelwright export"):
        export_package(target, make_info(tmp_path))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="link or not a folder"):
        export_package(a_file, make_info(tmp_path))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_empty_folder_is_fine(tmp_path: Path) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    export_package(target, make_info(tmp_path))
    assert is_export(target)


def test_replaces_an_earlier_export(tmp_path: Path) -> None:
    out = tmp_path / "kwexport"
    first = {**FILES, "kernels/old.cpp": "// stale\n"}
    export_package(out, make_info(tmp_path, first, run_id="run-00000001"))
    assert (out / "kernels" / "old.cpp").exists()
    info = make_info(tmp_path, run_id="run-00000002")
    export_package(out, info)
    assert not (out / "kernels" / "old.cpp").exists()
    assert _strict(out / "run.json")["run_id"] == "run-00000002"
    assert exported_candidate_hash(out) == info.candidate_hash
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_refuses_files_that_differ_from_the_judged_ones(tmp_path: Path) -> None:
    info = make_info(tmp_path)
    bad = make_info(tmp_path, candidate_hash="f" * 64, verdict={**info.verdict, "candidate": {"hash": "f" * 64}})
    with pytest.raises(ValueError, match=f"hash to {info.candidate_hash}, not the judged candidate's f{{64}}"):
        export_package(tmp_path / "out", bad)
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    with pytest.raises(ValueError, match="final verdict is for candidate"):
        make_info(tmp_path, candidate_hash="e" * 64)


def test_extra_files_ship_outside_the_hash(tmp_path: Path) -> None:
    out = tmp_path / "kwexport"
    info = make_info(tmp_path, extras={"recording.json": '{"turns": []}\n'})
    written = export_package(out, info)
    assert out / "recording.json" in written and (out / "recording.json").read_text() == '{"turns": []}\n'
    record = _strict(out / "run.json")
    assert record["extra_files"] == ["recording.json"] and "recording.json" not in record["candidate_files"]
    assert exported_candidate_hash(out) == info.candidate_hash
    with pytest.raises(ValueError, match="clash with the candidate"):
        make_info(tmp_path, extras={"model_new.py": ""})
    with pytest.raises(ValueError, match="clashes"):
        make_info(tmp_path, extras={"SUMMARY.md": ""})


@pytest.mark.parametrize("files, message", [
    ({"kernels/k.cpp": "//"}, "needs model_new.py"),
    ({"model_new.py": "", "../evil.py": ""}, "relative path"),
    ({"model_new.py": "", "/abs.py": ""}, "relative path"),
    ({"model_new.py": "", "run.json": "{}"}, "clashes"),
    ({"model_new.py": "", "__init__.py": ""}, "clashes"),
])
def test_malformed_candidates_are_refused(tmp_path: Path, files: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExportInfo(run_id="run-1", problem_name="p", problem_hash="h", problem_spec="s", model="m", strategy="refine",
                   objective={}, candidate_hash="c", files=files, verdict={})


def test_write_review(tmp_path: Path) -> None:
    out = tmp_path / "kwexport"
    export_package(out, make_info(tmp_path))
    write_review(out, approved=True, note="numbers hold\nup on two shapes")
    record = _strict(out / "run.json")
    assert record["approved"] is True and record["review_note"] == "numbers hold\nup on two shapes"
    assert record["reviewed_at"]
    summary = (out / "SUMMARY.md").read_text()
    assert "Review: approved — numbers hold up on two shapes" in summary and "not reviewed" not in summary
    write_review(out, approved=False, note="slow on odd sizes")
    summary = (out / "SUMMARY.md").read_text()
    assert summary.count("Review: ") == 1 and "Review: rejected — slow on odd sizes" in summary
    assert _strict(out / "run.json")["approved"] is False
    assert exported_candidate_hash(out) == record["candidate_hash"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    with pytest.raises(ValueError, match="not a kernelwright export"):
        write_review(tmp_path, approved=True, note="")


def test_init_survives_odd_problem_names(tmp_path: Path) -> None:
    from kernelwright.agent.export import init_text

    text = init_text(make_info(tmp_path, problem_name='odd\\N{x} """name"\nnext'))
    compile(text, "__init__.py", "exec")
