"""`resume` of a finished run: refused unless asked for (`again`); when asked, the earlier export and its
review stay as they were and the new export goes beside them, carrying the review when it is of the
same candidate. One short replay on the CPU softmax example: a reply with the good kernel, then the
recording runs out, so the run finishes, re-judges and exports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelwright.agent import demo_script, exporting, optimize
from kernelwright.agent.objective import Objective
from kernelwright.core.runs import Reply, RunStatus, Usage
from kernelwright.agent.replay import write_recording
from kernelwright.problems.loader import load_problem
from kernelwright.store import Store

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "cpu" / "softmax" / "problem.py"
FAST = dict(compile_baseline=False, seeds=1, timing_budget_s=0.5, max_turns=3)


@pytest.fixture(scope="module")
def reviewed_run(tmp_path_factory):
    """A finished replay run exported to out/ and approved there and in the store."""
    tmp = tmp_path_factory.mktemp("resume")
    problem = load_problem(str(PROBLEM))
    good = demo_script.candidates("cpu")["good"]
    recording = tmp / "one_turn.json"
    write_recording(recording, provenance={"note": "test: one good reply"}, problem={"name": problem.name, "hash": problem.hash},
                    objective=Objective(**FAST), strategy="refine",
                    turns=[("t0", Reply(text=f"```python\n{good}\n```", usage=Usage(100, 50)))], recorded_verdicts=[])
    store = tmp / "store.sqlite"
    req = optimize.RunRequest(problem_spec=str(PROBLEM), model=f"replay:{recording}", device="cpu", objective=Objective(**FAST),
                              out_dir=tmp / "out", store=store)
    result = optimize.start(req)
    assert result.status == RunStatus.FINISHED and result.out_dir == tmp / "out", result.summary
    with Store.open(store) as db:
        db.review_run(result.run_id, approved=True, note="checked the kernel")
        exporting.review(db.get_run(result.run_id), approved=True, note="checked the kernel")
    return result.run_id, store, tmp


def test_a_finished_run_is_not_resumed_unless_asked(reviewed_run):
    run_id, store, tmp = reviewed_run
    before = (tmp / "out" / "run.json").read_text()
    with pytest.raises(ValueError) as info:
        optimize.resume(run_id, store=store)
    assert "--again" in str(info.value) and str(tmp / "out") in str(info.value)
    assert (tmp / "out" / "run.json").read_text() == before


def test_a_resume_cannot_change_the_problems_size(reviewed_run):
    """The run's best candidates were timed at one size; a resume at another would compare across them."""
    run_id, store, _ = reviewed_run
    with pytest.raises(ValueError, match="cannot change it"):
        optimize.resume(run_id, store=store, again=True, changes={"size": "full"})


def test_resume_again_keeps_the_earlier_export_and_carries_the_review(reviewed_run):
    """Before: the resume re-exported over out/ and left "approved": true, "reviewed_at": null."""
    run_id, store, tmp = reviewed_run
    before = {p.name: p.read_bytes() for p in (tmp / "out").iterdir()}
    result = optimize.resume(run_id, store=store, again=True)
    assert result.out_dir == tmp / "out-2", result.summary
    assert {p.name: p.read_bytes() for p in (tmp / "out").iterdir()} == before  # the earlier export is untouched
    earlier, new = (json.loads((d / "run.json").read_text()) for d in (tmp / "out", tmp / "out-2"))
    assert earlier["approved"] is True and earlier["reviewed_at"]
    assert new["candidate_hash"] == earlier["candidate_hash"]
    assert new["approved"] is True and new["review_note"] == "checked the kernel" and new["reviewed_at"]
    assert "approved — checked the kernel" in (tmp / "out-2" / "SUMMARY.md").read_text()
    with Store.open(store) as db:
        run = db.get_run(run_id)
    assert run["approved"] is True and run["review_note"] == "checked the kernel" and run["out_dir"] == str(tmp / "out-2")


def test_an_earlier_export_gives_way_only_to_a_named_folder(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out-2").mkdir()
    assert exporting.next_out_dir(tmp_path / "out") == tmp_path / "out-3"
