"""The agent end to end on the CPU backend, against a real local HTTP server speaking the OpenAI
protocol (llm.scripted) that plays scripted replies: no LLM is involved. Candidates are the
softmax example's C++ kernel and small edits of it, judged for real.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwright.agent import demo_script, optimize
from kernelwright.agent.export import exported_candidate_hash
from kernelwright.agent.objective import Objective
from kernelwright.core.runs import RunStatus
from kernelwright.agent.replay import load_recording, write_recording
from kernelwright.llm.scripted import ScriptedServer
from kernelwright.store import Store

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "cpu" / "softmax" / "problem.py"
HINT = "subtract the row max before exp"
FAST = dict(compile_baseline=False, seeds=1, timing_budget_s=1.0)  # no torch.compile on the 2-core box


def _last(request: dict, role: str = "user") -> str:
    """The content of the request's last message with that role."""
    return [m for m in request["messages"] if m["role"] == role][-1]["content"] or ""


def _status(text: str) -> str | None:
    """The verdict status a feedback text states on its `status: ...` line (agent.feedback.describe)."""
    m = re.search(r"^status: (\w+) \(", text, re.M)
    return m.group(1) if m else None


def _tool_texts(request: dict) -> list[str]:
    """The tool results sent with a request (those after its last assistant message)."""
    msgs = request["messages"]
    last_assistant = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    return [m["content"] for m in msgs[last_assistant + 1:] if m["role"] == "tool"]


def _start(server: ScriptedServer, tmp_path: Path, **objective) -> optimize.RunResult:
    req = optimize.RunRequest(problem_spec=str(PROBLEM), model="openai:scripted", base_url=server.url, device="cpu",
                              objective=Objective(**{**FAST, **objective}), out_dir=tmp_path / "out", store=tmp_path / "store.sqlite",
                              timeout_s=30, note="test: scripted local server")
    return optimize.start(req)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One refine run over the whole script; shared by the tests that read it."""
    tmp = tmp_path_factory.mktemp("flow")
    with ScriptedServer(demo_script.optimize_script("cpu")) as server:
        result = _start(server, tmp, max_turns=7)
        return result, server.requests, tmp


def test_each_request_carried_the_feedback_of_the_turn_before(full_run):
    result, requests, _ = full_run
    assert len(requests) == 6  # submit ends the trajectory
    assert requests[0]["tools"] and {t["function"]["name"] for t in requests[0]["tools"]} >= {"write_file", "verify", "submit"}
    assert "softmax" in _last(requests[0]) and "```python" in _last(requests[0])  # the reference program
    assert "No candidate was found" in _last(requests[1])  # prose, no code
    second = _last(requests[2])
    assert "compile_error" in second and "error" in second.lower()  # the compiler's words came back
    assert _status(_last(requests[3])) == "incorrect"  # the off-by-one kernel
    written, verified = _tool_texts(requests[4])
    assert "model_new.py" in written and _status(verified) == "correct"
    (profiled,) = _tool_texts(requests[5])
    assert _status(profiled) == "correct" and "eager" in profiled and "reference" in profiled.lower()  # verdict and the reference's breakdown


def test_the_good_candidate_is_selected_rejudged_and_exported(full_run):
    result, _, tmp = full_run
    good = demo_script.candidates("cpu")["good"]
    assert result.status == RunStatus.FINISHED, result.summary
    assert result.final["status"] == "correct"
    out = result.out_dir
    assert (out / "model_new.py").read_text() == good
    assert exported_candidate_hash(out) == result.final["candidate"]["hash"]
    run = json.loads((out / "run.json").read_text())
    assert run["approved"] is None and run["candidate_hash"] == result.final["candidate"]["hash"]
    rec = load_recording(out / "recording.json")
    assert [t["key"] for t in rec["turns"]] == [f"t{i}" for i in range(6)]
    assert [v["status"] for v in rec["recorded_verdicts"]] == ["compile_error", "incorrect", "correct", "correct"]  # profile and submit


def test_every_step_is_in_the_store(full_run):
    result, _, tmp = full_run
    with Store.open(tmp / "store.sqlite") as db:
        run = db.get_run(result.run_id)
        steps = db.run_steps(result.run_id)
        kinds = [s["kind"] for s in steps]
        totals = db.run_totals(result.run_id)
    assert run["status"] == "finished" and run["out_dir"] == str(result.out_dir)
    assert kinds.count("prompt") == 6 and kinds.count("response") == 6
    assert kinds.count("tool_call") == 4 and kinds.count("final") == 1 and kinds[-1] == "export"
    submitted = [s["payload"]["result"]["text"] for s in steps if s["kind"] == "tool_call" and s["payload"]["call"]["name"] == "submit"]
    assert len(submitted) == 1 and _status(submitted[0]) == "correct" and "eager" in submitted[0]  # what the model was told
    assert totals["prompt_tokens"] > 0 and totals["completion_tokens"] > 0


def test_replay_judges_every_candidate_again(full_run, tmp_path):
    """A recording whose stored verdicts say 'correct' everywhere, and whose good turn was swapped
    for the wrong kernel: the replay's verdicts come from the judge, not the file."""
    result, _, _ = full_run
    rec = load_recording(result.out_dir / "recording.json")
    bad = demo_script.candidates("cpu")["wrong"]
    for turn in rec["turns"]:
        for call in turn["reply"]["tool_calls"]:
            if call["name"] == "write_file":
                call["arguments"]["content"] = bad
    forged = [{**v, "status": "correct", "speedup_vs_best": 9.9} for v in rec["recorded_verdicts"]]
    path = tmp_path / "forged.json"
    write_recording(path, provenance=rec["provenance"], problem=rec["problem"], objective=rec["objective"], strategy=rec["strategy"],
                    turns=rec["turns"], recorded_verdicts=forged)
    req = optimize.RunRequest(problem_spec=str(PROBLEM), model=f"replay:{path}", device="cpu", objective=Objective(**{**FAST, "max_turns": 7, "max_failures": 10, "stuck_after": 10}),
                              out_dir=tmp_path / "out", store=tmp_path / "store.sqlite")
    replayed = optimize.start(req)
    assert replayed.status == RunStatus.FINISHED and replayed.final is None  # nothing passed: the file's "correct" was not taken
    with Store.open(tmp_path / "store.sqlite") as db:
        steps = db.run_steps(replayed.run_id)
    statuses = [s["payload"]["verdict"]["status"] for s in steps if s["kind"] == "candidate"]
    assert statuses == ["compile_error", "incorrect", "incorrect", "incorrect"]  # the swapped-in kernel, profiled and submitted, is judged incorrect
    notes = [s["payload"].get("divergence", "") for s in steps if s["kind"] == "note"]
    assert any("recording says correct" in n for n in notes)


def test_stalled_run_pauses_and_a_hint_gets_it_going(tmp_path):
    with ScriptedServer(demo_script.stall_script("cpu", HINT)) as server:
        paused = _start(server, tmp_path, max_failures=2, target_speedup=0.01)
        assert paused.status == RunStatus.PAUSED and "stuck" in paused.summary
        with Store.open(tmp_path / "store.sqlite") as db:
            assert db.get_run(paused.run_id)["status"] == "paused"
        n = len(server.requests)
        resumed = optimize.resume(paused.run_id[:10], hint=HINT + ", and sum in double", store=tmp_path / "store.sqlite")
        assert HINT in _last(server.requests[n]) and "engineer" in _last(server.requests[n])
        assert len(server.requests) == n + 1
    assert resumed.status == RunStatus.SUCCEEDED, resumed.summary
    with Store.open(tmp_path / "store.sqlite") as db:
        kinds = [s["kind"] for s in db.run_steps(paused.run_id)]
    assert kinds.index("pause") < kinds.index("hint") < kinds.index("final")


def test_an_engineers_candidate_is_judged_and_handed_to_the_model(tmp_path):
    with ScriptedServer(demo_script.stall_script("cpu", HINT)) as server:
        paused = _start(server, tmp_path, max_failures=2, max_turns=3)
        assert paused.status == RunStatus.PAUSED
        mine = tmp_path / "mine"
        mine.mkdir()
        (mine / "model_new.py").write_text(demo_script.candidates("cpu")["good"])
        n = len(server.requests)
        resumed = optimize.resume(paused.run_id, candidate=mine, store=tmp_path / "store.sqlite")
        assert "An engineer edited the candidate" in _last(server.requests[n])
    assert resumed.final is not None and resumed.final["status"] == "correct"
    with Store.open(tmp_path / "store.sqlite") as db:
        steps = db.run_steps(paused.run_id)
    assert [s["payload"]["verdict"]["status"] for s in steps if s["kind"] == "engineer_candidate"] == ["correct"]


def test_cli_optimize_runs_review(tmp_path):
    store = tmp_path / "store.sqlite"
    env_cmd = [sys.executable, "-m", "kernelwright"]
    with ScriptedServer(demo_script.optimize_script("cpu")) as server:
        done = subprocess.run(env_cmd + ["optimize", str(PROBLEM), "--model", "openai:scripted", "--base-url", server.url, "--device", "cpu",
                                         "--no-compile-baseline", "--seeds", "1", "--timing-budget-s", "1", "--max-turns", "7",
                                         "--out", str(tmp_path / "out"), "--store", str(store), "--json"],
                              capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["status"] == "finished" and result["final_verdict"]["status"] == "correct"
    assert "t5: correct" in done.stderr and "exported to" in done.stderr  # live progress on stderr
    listed = json.loads(subprocess.run(env_cmd + ["runs", "list", "--store", str(store), "--json"], capture_output=True, text=True, check=True).stdout)
    assert [r["id"] for r in listed] == [result["run_id"]]
    shown = subprocess.run(env_cmd + ["runs", "show", result["run_id"], "--store", str(store)], capture_output=True, text=True, check=True).stdout
    assert "compile_error" in shown and "incorrect" in shown
    rv = subprocess.run(env_cmd + ["review", result["run_id"], "--approve", "--note", "checked the kernel", "--store", str(store)],
                        capture_output=True, text=True)
    assert rv.returncode == 0, rv.stderr
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["approved"] is True and run["review_note"] == "checked the kernel"
    assert "approved" in (tmp_path / "out" / "SUMMARY.md").read_text()


def test_tree_search_banks_the_best_and_builds_on_it(tmp_path):
    c = demo_script.candidates("cpu")
    block = lambda code: f"```python\n{code}\n```"  # noqa: E731
    script = [{"when": "Propose", "text": "1. hold the row in cache and fuse the passes\n2. vectorise the max"}] * 2
    script += [{"when": "Implement this idea", "text": block(c["wrong"])}, {"when": "Implement this idea", "text": block(c["good"])}]
    script += [{"when": "Fix the problem", "text": block(c["good"])}] * 2
    script += [{"when": "Implement this idea", "text": block(c["good"])}] * 8
    with ScriptedServer(script) as server:
        result = _start(server, tmp_path, strategy="tree", rounds=2, ideas=2, branches=2, parallel_builds=2)
        ideas_requests = [r for r in server.requests if "Propose" in _last(r)]
    assert result.final is not None and result.final["status"] == "correct", result.summary
    assert len(ideas_requests) == 2
    assert "best verified candidate so far" in _last(ideas_requests[1])  # round 2 saw round 1's bank
    with Store.open(tmp_path / "store.sqlite") as db:
        steps = db.run_steps(result.run_id)
    banks = [s["payload"]["bank"] for s in steps if s["kind"] == "bank"]
    assert len(banks) == 2 and banks[0] and banks[0][0]["verdict"]["status"] == "correct"


@pytest.mark.parametrize("device,problem", [("cpu", "softmax"), ("cpu", "elementwise_chain"), ("cuda", "softmax")])
def test_shipped_recordings_fit_their_examples_and_say_where_they_came_from(device, problem):
    from kernelwright.problems.loader import load_problem

    rec = load_recording(ROOT / "examples" / "recordings" / f"{device}_{problem}.json")
    assert rec["problem"]["hash"] == load_problem(ROOT / "examples" / device / problem / "problem.py").hash
    assert "scripted local server" in rec["provenance"]["note"] and rec["provenance"]["backend"] == "openai:scripted"
    assert [t["key"] for t in rec["turns"]][:3] == ["t0", "t1", "t2"]
    assert [v["status"] for v in rec["recorded_verdicts"]][:2] == ["compile_error", "incorrect"]  # failed turns included


def test_the_demo_replays_the_cpu_recording_and_judges_it_again(tmp_path):
    """The README's main job, with the fast test settings (the demo itself keeps the judge's defaults)."""
    done = subprocess.run([sys.executable, "-m", "kernelwright", "optimize", "--demo", "--device", "cpu", "--no-compile-baseline", "--seeds", "1",
                           "--timing-budget-s", "1", "--out", str(tmp_path / "out"), "--store", str(tmp_path / "store.sqlite"), "--json"],
                          capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["final_verdict"]["status"] == "correct"
    with Store.open(tmp_path / "store.sqlite") as db:
        steps = db.run_steps(result["run_id"])
        totals = db.run_totals(result["run_id"])
    assert [s["payload"]["verdict"]["status"] for s in steps if s["kind"] == "candidate"][:2] == ["compile_error", "incorrect"]
    assert result["final_verdict"]["problem"]["name"] == "elementwise_chain"  # the CPU demo's problem
    recorded = load_recording(ROOT / "examples" / "recordings" / "cpu_elementwise_chain.json")["turns"]
    assert totals["prompt_tokens"] == sum(t["reply"]["usage"]["prompt_tokens"] for t in recorded) > 0  # the recording's tokens are counted
    assert totals["completion_tokens"] == sum(t["reply"]["usage"]["completion_tokens"] for t in recorded)
    assert totals["cost_usd"] is None  # ... and a replay spends nothing
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["provenance"]["replayed"] is True and "scripted" in run["provenance"]["recording_provenance"]["note"]


def test_the_cpu_demo_says_what_a_cpu_run_shows(tmp_path, monkeypatch, capsys):
    """The human view of a CPU demo ends with one plain sentence on what CPU times are; other runs do not print it."""
    import argparse

    from kernelwright.agent import commands

    final = {"status": "correct", "policy": {"device": "cpu"}}
    result = argparse.Namespace(run_id="run-x", status=argparse.Namespace(value="finished"), summary="s", out_dir=None, final=None)
    monkeypatch.setattr("kernelwright.report.summary.print_verdict", lambda *a, **k: None)
    monkeypatch.setattr("kernelwright.core.records.Verdict.from_dict", staticmethod(lambda d: d))
    for demo, device, said in ((True, "cpu", True), (True, "cuda", False), (False, "cpu", False)):
        result.final = {**final, "policy": {"device": device}}
        commands._report(argparse.Namespace(json=False, demo=demo), result)
        assert (commands.CPU_DEMO_SENTENCE.split(":")[0] in capsys.readouterr().out.replace("\n", " ")) is said
    (tmp_path / "out" / "kernels").mkdir(parents=True)
    for name in ("model_new.py", "run.json", "kernels/k.cpp"):
        (tmp_path / "out" / name).write_text("x")
    result.out_dir = tmp_path / "out"
    commands._report(argparse.Namespace(json=False, demo=False), result)
    assert f"exported to {tmp_path / 'out'}: kernels/k.cpp, model_new.py, run.json" in capsys.readouterr().err


def test_the_cpu_demo_script_edits_the_elementwise_kernel():
    """The scripted failing turns are real edits of the good kernel, which is the shipped example's
    kernels/ file folded into model_new.py."""
    c = demo_script.candidates("cpu", "elementwise_chain")
    kernel = (ROOT / "examples" / "cpu" / "elementwise_chain" / "kernels" / "elementwise_chain.cpp").read_text()
    assert kernel.strip() in c["good"] and "runtime.load(CPP_SRC)" in c["good"] and "pathlib" not in c["good"]
    assert c["compile_error"] != c["good"] and c["wrong"] != c["good"]
    with pytest.raises(ValueError):
        demo_script.candidates("cuda", "elementwise_chain")
