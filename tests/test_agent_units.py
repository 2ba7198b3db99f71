"""The agent's rules that need no judge: the final re-judge's refusals, stuck detection, the
objective's sources (flags, config file, recording), reserved names, the --out check."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelwright.agent import commands, exporting, search
from kernelwright.agent.loop import Counters
from kernelwright.agent.objective import Objective, load_config, merge
from kernelwright.agent.optimize import _final_refusal, sanitizer_gap
from kernelwright.agent.workspace import Workspace


def _tool(name, errors, done=True):
    return {"tool": name, "errors": errors, "forward_completed": done}


def test_the_final_rejudge_refuses_sanitizer_errors_and_passes_a_clean_run():
    clean = {"status": "correct", "sanitizer": {"ran": True, "errors": 0, "tools": [_tool("memcheck", 0), _tool("racecheck", 0)]}}
    assert _final_refusal(clean) == "" and sanitizer_gap(clean) == ""
    assert _final_refusal({"status": "correct", "sanitizer": None}) == ""  # CPU: no sanitizer
    dirty = {"status": "correct", "sanitizer": {"ran": True, "errors": 2, "tools": [_tool("memcheck", 2), _tool("racecheck", 0)]}}
    assert "memcheck 2" in _final_refusal(dirty)
    # one tool found errors while another gave no count: the total is None, the refusal still holds
    partial = {"status": "correct", "sanitizer": {"ran": True, "errors": None, "tools": [_tool("memcheck", 3), _tool("racecheck", None, False)]}}
    assert "memcheck 3" in _final_refusal(partial)
    timed_out = {"status": "correct", "sanitizer": {"ran": True, "errors": None, "tools": [_tool("memcheck", 0), _tool("racecheck", None, False)]}}
    assert _final_refusal(timed_out) == "" and "racecheck" in sanitizer_gap(timed_out)
    assert "did not run" in sanitizer_gap({"status": "correct", "sanitizer": {"ran": False, "reason": "no GPU", "tools": []}})
    assert _final_refusal({"status": "incorrect"}) == "incorrect"


def test_done_is_a_line_of_its_own():
    from kernelwright.agent.loop import DONE

    assert DONE.search("All good.\nDONE\n") and DONE.search("DONE.")
    assert not DONE.search("ABANDONED the idea") and not DONE.search("not DONE yet")


@pytest.mark.parametrize("counters,expected", [
    (Counters(), None),
    (Counters(failures=4), "4 failed turns"),
    (Counters(since_gain=4), "no gain over the best in 4 judged candidates"),
    (Counters(idle=12), "12 tool turns in a row without judging"),
    (Counters(idle=11, failures=3, since_gain=3), None),
])
def test_stuck_rules(counters, expected):
    ctx = SimpleNamespace(objective=Objective(), counters=counters)
    got = search.stuck_reason(ctx, "judged candidates")
    assert (got is None) if expected is None else (expected in got)


def test_a_config_file_sets_the_objective_and_flags_win(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('[objective]\ntarget_speedup = 1.5\nstrategy = "tree"\nrounds = 3\n')
    objective = merge(load_config(cfg), {"rounds": 7, "branches": None})
    assert (objective.target_speedup, objective.strategy, objective.rounds, objective.branches) == (1.5, "tree", 7, 4)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rounds": 2, "speed": 3}))
    with pytest.raises(ValueError, match="unknown objective settings \\['speed'\\]"):
        merge(load_config(bad), {})


def test_a_recording_sets_search_settings_but_never_the_judging_rules(tmp_path):
    rec = tmp_path / "r.json"
    loose = Objective(max_turns=9, strategy="refine", atol=1.0, rtol=1.0, allow_torch_compute=True, libraries=("cublas",))
    from kernelwright.agent.replay import write_recording

    write_recording(rec, provenance={}, problem={"name": "p", "hash": "h", "source": ""}, objective=loose, strategy="refine",
                    turns=[], recorded_verdicts=[])
    args = argparse.Namespace(config=None, **{flag: None for flag in commands.OBJECTIVE_FLAGS})
    objective = commands._objective(args, f"replay:{rec}")
    assert objective.max_turns == 9
    assert (objective.atol, objective.rtol, objective.allow_torch_compute, objective.libraries) == (None, None, False, ())


def test_the_workspace_refuses_the_names_an_export_writes(tmp_path):
    ws = Workspace(tmp_path)
    ws.write("model_new.py", "class ModelNew: pass\n")
    for name in ("__init__.py", "run.json", "SUMMARY.md"):
        with pytest.raises(ValueError, match="exported package writes itself"):
            ws.write(name, "x")


def test_out_must_be_new_empty_or_an_earlier_export(tmp_path):
    exporting.check_out_dir(tmp_path / "new")
    exporting.check_out_dir(tmp_path)  # empty
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="--out"):
        exporting.check_out_dir(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "new", target_is_directory=True)
    with pytest.raises(ValueError, match="--out"):
        exporting.check_out_dir(link)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "run.json").write_text(json.dumps({"format": "kernelwright-export/1", "run_id": "run-00000000"}))
    exporting.check_out_dir(earlier)


def test_resume_refuses_an_engineer_candidate_with_reserved_names_before_touching_the_run(tmp_path):
    from kernelwright.agent import optimize

    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "model_new.py").write_text("class ModelNew: pass\n")
    (cand / "__init__.py").write_text("")
    with pytest.raises(ValueError, match="__init__.py"):
        optimize.resume("run-00000000", candidate=cand, store=tmp_path / "store.sqlite")
    assert not (tmp_path / "store.sqlite").exists()
    with pytest.raises(ValueError):
        optimize.resume("run-00000000", candidate=tmp_path / "missing", store=tmp_path / "store.sqlite")


def test_a_resumed_tree_gets_another_round_under_new_slots():
    from kernelwright.agent.optimize import _grant

    refine = {"trajectory": {"turn": 40}}
    _grant(Objective(max_turns=40, max_failures=4), refine)
    assert refine["turn_limit"] == 44  # a finished refine run still sends the hint
    state = {"round": 5, "resumes": 0}
    _grant(Objective(strategy="tree", rounds=5), state)
    assert state["round_limit"] == 6 and search.resume_prefix(state) == "x1/"
    batch = {"done": 4}
    _grant(Objective(strategy="best-of-n"), batch)
    assert batch["done"] == 0 and search.resume_prefix(batch) == "x1/"


def test_export_check_of_the_reserved_list_matches_the_package_files():
    from kernelwright.agent.export import PACKAGE_FILES
    from kernelwright.agent.workspace import RESERVED

    assert set(PACKAGE_FILES) <= set(RESERVED) and "recording.json" in RESERVED
    assert Path(exporting.RECORDING).name == "recording.json"


def test_resume_refuses_a_run_still_marked_running_unless_forced(tmp_path):
    from kernelwright.agent import optimize
    from kernelwright.store import Store

    problem = Path(__file__).resolve().parents[1] / "examples" / "cpu" / "softmax" / "problem.py"
    from kernelwright.problems.loader import load_problem

    p = load_problem(problem)
    with Store.open(tmp_path / "store.sqlite") as db:
        db.create_run("run-0000abcd", problem_hash=p.hash, problem_name=p.name, problem_spec=str(problem), model="replay:none.json",
                      strategy="refine", objective=Objective().to_dict())
        db.update_run("run-0000abcd", status="running")
    with pytest.raises(ValueError, match="marked running"):
        optimize.resume("run-0000abcd", hint="x", store=tmp_path / "store.sqlite")
    with pytest.raises(ValueError, match="cannot read recording"):  # forced: it gets as far as the backend
        optimize.resume("run-0000abcd", hint="x", store=tmp_path / "store.sqlite", force=True)


def test_the_agents_build_children_and_compilers_are_confined_by_the_policys_sandbox(tmp_path, monkeypatch):
    """The compile tool's torch-extension build child gets the judge's spec for a candidate (the
    policy's mode, its extension folder writable) and may read only its problem and its candidate;
    its raw builds run their compilers under the policy's mode, as the judge's own do."""
    from kernelwright.agent import judging
    from kernelwright.judge import sandbox, workers
    from kernelwright.judge.candidate import discover
    from kernelwright.judge.policy import Policy
    from kernelwright.problems.loader import load_problem

    root = Path(__file__).resolve().parent / "fixtures"
    problem = load_problem(root / "problems" / "relu.py")
    j = judging.Judge(problem, SimpleNamespace(policy=lambda: Policy(sandbox="strict")), device="cpu", store=None, record=False)
    seen = {}

    class FakeChild:
        def __init__(self, config):
            seen["config"] = config

        def call(self, *a, **k):
            raise workers.ChildError("compile", "stopped here by the test")

        def close(self):
            pass

    monkeypatch.setattr(workers, "Child", FakeChild)
    cand = root / "candidates" / "relu_ext"
    report = j._compile_extension(discover(cand), 0.0, cand)
    assert not report.ok
    config = seen["config"]
    spec = sandbox.Spec.from_env(config.env[sandbox.SPEC_ENV])
    assert spec.mode == "strict" and config.env["TORCH_EXTENSIONS_DIR"] in spec.write
    assert config.sandbox_read[0] == str(problem.path) and len(config.sandbox_read) == 2
    modes = []
    monkeypatch.setattr(judging, "prebuild", lambda files, timeout_s, sandbox_mode="auto": modes.append(sandbox_mode) or [])
    j._compile_raw(discover(root / "candidates" / "relu_correct"), 0.0)
    assert modes == ["strict"]


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this machine")
def test_the_agents_extension_build_takes_the_folder_its_verify_will(tmp_path, monkeypatch):
    """The compile tool's build child works where the judge's evaluation does (evaluate.work_folder):
    /dev/shm when it is roomy, else TMPDIR, so a closed TMPDIR does not fail a build that verify passes."""
    import tempfile

    from kernelwright.agent import judging
    from kernelwright.judge import evaluate, workers
    from kernelwright.judge.candidate import discover
    from kernelwright.judge.policy import Policy
    from kernelwright.problems.loader import load_problem

    root = Path(__file__).resolve().parent / "fixtures"
    j = judging.Judge(load_problem(root / "problems" / "relu.py"), SimpleNamespace(policy=lambda: Policy(sandbox="off")),
                      device="cpu", store=None, record=False)
    seen = []

    class FakeChild:
        def __init__(self, config):
            seen.append(config.workdir)

        def call(self, *a, **k):
            raise workers.ChildError("compile", "stopped here by the test")

        def close(self):
            pass

    monkeypatch.setattr(workers, "Child", FakeChild)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cand = root / "candidates" / "relu_ext"
    for free, where in ((0, Path("/dev/shm")), (1 << 62, tmp_path)):
        monkeypatch.setattr(evaluate, "SHM_MIN_FREE", free)
        assert not j._compile_extension(discover(cand), 0.0, cand).ok
        assert seen[-1].parent == where and seen[-1].name.startswith("kw-agent-build-") and not seen[-1].exists()
