"""`kernelwright rl rollout` (kernelwright.rl.rollout) against a scripted OpenAI-compatible server
on loopback: episodes many at a time, each recorded once in episodes.jsonl and the store, a model
failure excluded, and a rollout killed mid-run and resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import CANDIDATES, JUDGE_TIMEOUT_S, PROBLEMS
from kernelwright.agent.objective import Objective
from kernelwright.llm.backend import make_backend
from kernelwright.llm.scripted import ScriptedServer
from kernelwright.rl.env import EnvConfig
from kernelwright.rl.rollout import EPISODES, run_rollout
from kernelwright.rl.tasks import load_tasks
from kernelwright.store import Store

GOOD = (CANDIDATES / "relu_correct" / "model_new.py").read_text()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tasks(tmp_path, names):
    folder = tmp_path / "problems"
    folder.mkdir()
    for n in names:
        (folder / f"{n}.py").write_text((PROBLEMS / f"{n}.py").read_text())
    return load_tasks(folder, heldout=0.0)


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)
def test_sixteen_episodes_four_at_a_time_each_recorded_once_with_its_reward(tmp_path):
    tasks = _tasks(tmp_path, ["relu", "rowsum", "outer", "global_mean"])
    script = [{"when": "`relu`", "text": f"```python\n{GOOD}\n```"}] + [{"text": "I have no kernel yet."} for _ in range(15)]
    store = tmp_path / "store.sqlite"
    config = EnvConfig(device="cpu", objective=Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0, max_turns=1),
                       tools=False, reply_submits=True, store=store, workroot=tmp_path / "eps")
    with ScriptedServer(script) as server:
        backend = make_backend("openai:scripted", base_url=server.url, max_retries=0)
        result = run_rollout(tasks, backend, config, episodes=16, concurrency=4, out=tmp_path / "out")
    rows = _lines(tmp_path / "out" / EPISODES)
    assert sorted(r["seq"] for r in rows) == list(range(16)) and result["recorded"] == 16 == result["new"]
    judged = [r for r in rows if r["final"]["verdict"]]
    assert len(judged) == 1 and judged[0]["task"]["id"] == "relu" and judged[0]["final"]["verdict"]["status"] == "correct"
    assert judged[0]["reward"]["milestone"] >= 1
    others = [r for r in rows if not r["final"]["verdict"]]
    assert all(r["reward"]["value"] == -1.0 and r["end"] == "turn limit (1)" for r in others)
    assert {r["task"]["id"] for r in rows} == {"relu", "rowsum", "outer", "global_mean"}
    with Store.open(store) as db:
        eps = db.episodes(result["rollout"])
    assert [e["seq"] for e in eps] == list(range(16)) and len({e["episode_id"] for e in eps}) == 16
    assert result["milestones"]["-1"] == 15 and result["excluded"] == 0 and all(r["model"] == "openai:scripted" for r in rows)


def test_a_model_that_fails_leaves_its_episodes_for_resume_and_three_in_a_row_stop_the_rollout(tmp_path):
    from kernelwright.rl.rollout import ModelDown

    tasks = _tasks(tmp_path, ["rowsum"])
    config = EnvConfig(device="cpu", objective=Objective(compile_baseline=False, seeds=1, max_turns=1), tools=False,
                       store=tmp_path / "s.sqlite", workroot=tmp_path / "eps")
    with ScriptedServer([{"text": "thinking"}]) as server:  # one answer, then HTTP 500: the script is spent
        backend = make_backend("openai:scripted", base_url=server.url, max_retries=0)
        with pytest.raises(ModelDown, match="--resume"):
            run_rollout(tasks, backend, config, episodes=5, concurrency=1, out=tmp_path / "out")
    rows = _lines(tmp_path / "out" / EPISODES)
    assert [r["seq"] for r in rows] == [0] and rows[0]["model"] == "openai:scripted"  # the failed ones are not recorded
    with ScriptedServer([{"text": "thinking"} for _ in range(4)]) as server:  # the server is back
        backend = make_backend("openai:scripted", base_url=server.url, max_retries=0)
        with pytest.raises(ValueError, match="--resume"):
            run_rollout(tasks, backend, config, episodes=5, concurrency=1, out=tmp_path / "out")
        with pytest.raises(ValueError, match="same"):  # another model on the same rollout
            run_rollout(tasks, make_backend("openai:other", base_url=server.url), config, episodes=None, concurrency=1,
                        out=tmp_path / "out", resume=True)
        result = run_rollout(tasks, backend, config, episodes=None, concurrency=2, out=tmp_path / "out", resume=True)
    assert result["recorded"] == 5 == result["episodes"] and result["new"] == 4
    assert sorted(r["seq"] for r in _lines(tmp_path / "out" / EPISODES)) == list(range(5))
    with pytest.raises(ValueError, match="no rollout to resume"):
        run_rollout(tasks, backend, config, episodes=1, concurrency=1, out=tmp_path / "other", resume=True)


def test_a_nan_in_the_models_arguments_is_recorded_and_the_store_catches_up_with_the_file(tmp_path):
    tasks = _tasks(tmp_path, ["rowsum"])
    store = tmp_path / "s.sqlite"
    config = EnvConfig(device="cpu", objective=Objective(compile_baseline=False, seeds=1, max_turns=1), store=store,
                       workroot=tmp_path / "eps")
    script = [{"tool_calls": [{"name": "list_files", "arguments": '{"path": NaN}'}]} for _ in range(2)]
    with ScriptedServer(script) as server:
        backend = make_backend("openai:scripted", base_url=server.url, max_retries=0)
        first = run_rollout(tasks, backend, config, episodes=2, concurrency=2, out=tmp_path / "out")
    assert first["recorded"] == 2
    for line in (tmp_path / "out" / EPISODES).read_text().splitlines():  # strict JSON: no bare NaN (the model's text keeps its own)
        assert json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in the record"))["reward"]["value"] == -1.0
    with Store.open(store) as db:  # a crash between the file and the store: the next run puts the missing row
        db._conn.execute("DELETE FROM rl_episodes WHERE seq = 1")
    with ScriptedServer([]) as server:
        run_rollout(tasks, make_backend("openai:scripted", base_url=server.url, max_retries=0), config, episodes=None, concurrency=1,
                    out=tmp_path / "out", resume=True)
    with Store.open(store) as db:
        assert [e["seq"] for e in db.episodes(first["rollout"])] == [0, 1]


def test_a_bad_line_inside_the_episodes_file_is_an_error_and_a_second_process_is_refused(tmp_path):
    from kernelwright.rl.rollout import _lock, _read_done

    path = tmp_path / EPISODES
    path.write_text('{"seq": 0}\nnot json\n{"seq": 2}\n')
    with pytest.raises(ValueError, match=":2: not an episode record"):
        _read_done(path)
    path.write_text('{"seq": 0}\n{"seq": 1}\n{"seq"')
    assert sorted(_read_done(path)) == [0, 1] and path.read_text() == '{"seq": 0}\n{"seq": 1}\n'
    held = _lock(tmp_path / "out")
    with pytest.raises(ValueError, match="in use by another rollout"):
        _lock(tmp_path / "out")
    held.close()
    _lock(tmp_path / "out").close()


@pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)
def test_a_rollout_killed_mid_run_resumes_and_records_every_episode_once(tmp_path):
    for n in ("relu", "rowsum"):
        (tmp_path / f"{n}.py").write_text((PROBLEMS / f"{n}.py").read_text())
    out, store = tmp_path / "out", tmp_path / "store.sqlite"
    script = [{"text": "no kernel", "delay_s": 0.4} for _ in range(40)]
    with ScriptedServer(script) as server:
        cmd = [sys.executable, "-m", "kernelwright", "rl", "rollout", "--tasks", str(tmp_path), "--model", "openai:scripted",
               "--base-url", server.url, "--episodes", "16", "--concurrency", "4", "--out", str(out), "--device", "cpu",
               "--max-turns", "1", "--no-tools", "--heldout", "0", "--split", "all", "--store", str(store)]
        env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / EPISODES).exists() and len((out / EPISODES).read_text().splitlines()) >= 4:
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        first = len(_lines(out / EPISODES))
        assert 4 <= first < 16, (first, proc.stdout.read().decode()[-2000:])
        again = subprocess.run(cmd + ["--resume", "--json"], env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
    rows = _lines(out / EPISODES)
    assert sorted(r["seq"] for r in rows) == list(range(16)), [r["seq"] for r in rows]
    summary = json.loads(again.stdout)
    assert summary["recorded"] == 16 and summary["new"] == 16 - first
    with Store.open(store) as db:
        assert [e["seq"] for e in db.episodes(summary["rollout"])] == list(range(16))


def _record(rid, reward, *, split="train", excluded=False, text="```python\nx = 1\n```", problem="h1", tools=False):
    calls = [{"id": "c0", "name": "submit", "arguments": {}}] if tools else []
    msgs = [{"role": "system", "content": "skill"}, {"role": "user", "content": "problem"},
            {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}]
    if tools:
        msgs.append({"role": "tool", "content": "submitted.", "tool_call_id": "c0", "name": "submit"})
    return {"id": rid, "task": {"id": "t", "split": split, "problem": {"hash": problem}}, "messages": msgs, "excluded": excluded,
            "reward": {"value": None if excluded else reward, "milestone": None if excluded else int(reward)}}


def test_export_sft_keeps_good_train_episodes_once_in_chat_form(tmp_path):
    from kernelwright.rl.sft import export_sft, read_episodes

    folder = tmp_path / "ro"
    folder.mkdir()
    recs = [_record("a", 3.0), _record("b", 3.0), _record("c", 1.0, text="other"), _record("d", 2.0, split="test", problem="h3"),
            _record("e", 0.0, excluded=True), _record("f", 2.0, problem="h2", tools=True), {"id": "g", "task": {}}]
    (folder / EPISODES).write_text("".join(json.dumps({"seq": i, **r}) + "\n" for i, r in enumerate(recs)) + '{"cut sho')
    got = read_episodes([str(folder)])
    assert [r["id"] for r in got] == list("abcdefg")  # the cut last line is dropped
    assert (folder / EPISODES).read_text().endswith('{"cut sho')  # by the reader, not from the file: an export changes no rollout
    result = export_sft(got, tmp_path / "sft.jsonl", min_reward=2.0)
    assert result["written"] == 2 and result["skipped"] == {"excluded": 1, "below": 1, "split": 1, "duplicate": 1, "unfinished": 1}
    rows = _lines(tmp_path / "sft.jsonl")
    assert [r["episode_id"] for r in rows] == ["a", "f"] and all(r["split"] == "train" for r in rows)
    assert rows[0]["tools"] == [] and rows[0]["messages"][-1] == {"role": "assistant", "content": "```python\nx = 1\n```"}
    call = rows[1]["messages"][2]["tool_calls"][0]
    assert call["function"] == {"name": "submit", "arguments": "{}"} and rows[1]["messages"][3]["role"] == "tool"
    assert {t["function"]["name"] for t in rows[1]["tools"]} >= {"submit", "verify"}
    everything = export_sft(got, tmp_path / "all.jsonl", min_reward=2.0, split="all")
    assert everything["written"] == 3
    with pytest.raises(ValueError, match="neither a rollout folder"):
        read_episodes([str(tmp_path / "missing")])


def test_export_sft_splits_again_when_asked_writes_arguments_as_objects_and_drops_a_repeated_episode(tmp_path):
    from kernelwright.rl.sft import export_sft
    from kernelwright.rl.tasks import split_of

    hashes = [f"{i:064x}" for i in range(40)]
    test = next(h for h in hashes if split_of(h, 0.5) == "test")
    train = next(h for h in hashes if split_of(h, 0.5) == "train")
    a = {**_record("a", 3.0, problem=test, tools=True), "rollout": "ro-1", "seq": 0}
    b = {**_record("b", 3.0, problem=train, tools=True), "rollout": "ro-1", "seq": 1}
    b["messages"][2]["tool_calls"][0]["arguments"] = {"note": "x"}
    again = {**a, "id": "a-again"}  # the same (rollout, seq) twice, as two processes could have written it
    result = export_sft([a, b, again], tmp_path / "sft.jsonl", min_reward=1.0, heldout=0.5, arguments="object")
    assert result["written"] == 1 and result["skipped"]["split"] == 1 and result["skipped"]["duplicate"] == 1
    (row,) = _lines(tmp_path / "sft.jsonl")
    assert row["episode_id"] == "b" and row["split"] == "train"
    assert row["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"note": "x"}


@pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)
def test_episodes_not_started_in_time_are_left_for_resume(tmp_path):
    """--start-within-minutes: the running episode finishes, later ones do not start, and a resume
    runs exactly those."""
    tasks = _tasks(tmp_path, ["relu"])
    config = EnvConfig(device="cpu", objective=Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0, max_turns=1), tools=False,
                       reply_submits=True, store=tmp_path / "s.sqlite", workroot=tmp_path / "eps")
    script = [{"text": f"```python\n{GOOD}\n```"}] + [{"text": "thinking"} for _ in range(3)]
    with ScriptedServer(script) as server:
        backend = make_backend("openai:scripted", base_url=server.url, max_retries=0)
        first = run_rollout(tasks, backend, config, episodes=4, concurrency=1, out=tmp_path / "out", start_within_s=1.0)
        assert (first["recorded"], first["not_started"]) == (1, 3)  # the first one's judgement outlasts the 1 s to start in
        assert _lines(tmp_path / "out" / EPISODES)[0]["final"]["verdict"]["status"] == "correct"
        second = run_rollout(tasks, backend, config, episodes=None, concurrency=2, out=tmp_path / "out", resume=True)
    assert (second["recorded"], second["new"], second["not_started"]) == (4, 3, 0)
    assert sorted(r["seq"] for r in _lines(tmp_path / "out" / EPISODES)) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="positive"):
        run_rollout(tasks, backend, config, episodes=1, concurrency=1, out=tmp_path / "x", start_within_s=0)


def test_a_rollout_resumes_only_in_its_own_language(tmp_path):
    from dataclasses import replace as changed

    tasks = _tasks(tmp_path, ["rowsum"])
    config = EnvConfig(device="cpu", objective=Objective(compile_baseline=False, seeds=1, max_turns=1, language="triton"), tools=False,
                       store=tmp_path / "s.sqlite", workroot=tmp_path / "eps")
    with ScriptedServer([{"text": "thinking"} for _ in range(2)]) as server:
        backend = make_backend("openai:scripted", base_url=server.url, max_retries=0)
        run_rollout(tasks, backend, config, episodes=2, concurrency=1, out=tmp_path / "out", start_within_s=0.001)
        assert json.loads((tmp_path / "out" / "rollout.json").read_text())["language"] == "triton"
        cuda = changed(config, objective=changed(config.objective, language="cuda"))
        with pytest.raises(ValueError, match="--language triton"):
            run_rollout(tasks, backend, cuda, episodes=None, concurrency=1, out=tmp_path / "out", resume=True)
        assert run_rollout(tasks, backend, config, episodes=None, concurrency=1, out=tmp_path / "out", resume=True)["recorded"] == 2
