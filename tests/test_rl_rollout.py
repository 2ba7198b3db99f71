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
    assert result["milestones"]["-1"] == 15 and result["excluded"] == 0


def test_a_failed_model_request_ends_the_episode_excluded_and_a_rollout_refuses_to_overwrite(tmp_path):
    tasks = _tasks(tmp_path, ["rowsum"])
    config = EnvConfig(device="cpu", objective=Objective(compile_baseline=False, seeds=1, max_turns=3), tools=False,
                       store=tmp_path / "s.sqlite", workroot=tmp_path / "eps")
    with ScriptedServer([{"text": "thinking"}]) as server:  # the second request finds the script exhausted: HTTP 500
        backend = make_backend("openai:scripted", base_url=server.url, max_retries=0)
        result = run_rollout(tasks, backend, config, episodes=1, concurrency=1, out=tmp_path / "out")
        (row,) = _lines(tmp_path / "out" / EPISODES)
        assert row["excluded"] and row["reward"]["value"] is None and row["end"].startswith("aborted: the model's request failed")
        assert result["excluded"] == 1 and result["mean_reward"] is None
        with pytest.raises(ValueError, match="--resume"):
            run_rollout(tasks, backend, config, episodes=1, concurrency=1, out=tmp_path / "out")
        with pytest.raises(ValueError, match="no rollout to resume"):
            run_rollout(tasks, backend, config, episodes=1, concurrency=1, out=tmp_path / "other", resume=True)


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
    (folder / EPISODES).write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"cut sho')
    got = read_episodes([str(folder)])
    assert [r["id"] for r in got] == list("abcdefg")  # the cut last line is dropped
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
