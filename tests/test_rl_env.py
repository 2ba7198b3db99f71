"""The RL environment (kernelwright.rl.env) on the CPU backend: episodes through the agent's tools,
ended by submit or a limit, paid by the milestone of a final verdict on fresh seeds."""

from __future__ import annotations

import pytest

from conftest import CANDIDATES, JUDGE_TIMEOUT_S, PROBLEMS
from kernelwright.agent.objective import Objective
from kernelwright.core.runs import Reply, ToolCall, Usage
from kernelwright.rl import EnvConfig, EpisodeOver, KernelEnv, RewardConfig, milestone, parse_action

FAST = Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0, max_turns=6)
GOOD = (CANDIDATES / "relu_correct" / "model_new.py").read_text()
WRONG = GOOD.replace("x[i] < 0.0f ? 0.0f : x[i]", "x[i] < 0.0f ? 0.0f : 2.0f * x[i]")


def env(tmp_path, **kw) -> KernelEnv:
    return KernelEnv(EnvConfig(device="cpu", objective=kw.pop("objective", FAST), store=tmp_path / "store.sqlite",
                               workroot=tmp_path / "episodes", **kw))


def _rollout_bench():
    """benchmarks/rl_rollout_bench.py, loaded as test_bench_helpers loads the benchmark scripts."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "rl_rollout_bench.py"
    spec = importlib.util.spec_from_file_location("kw_bench_rl_rollout_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(code: str) -> dict:
    return {"name": "write_file", "arguments": {"path": "model_new.py", "content": code}}


def test_actions_in_every_form_parse_to_a_reply_and_calls():
    text, calls, tokens = parse_action({"id": "c1", "type": "function", "function": {"name": "verify", "arguments": "{}"}})
    assert text == "" and [c.name for c in calls] == ["verify"] and calls[0].id == "c1" and tokens == 0
    _, calls, _ = parse_action([{"name": "compile"}, ToolCall("x", "verify", {})])
    assert [c.name for c in calls] == ["compile", "verify"]
    _, calls, _ = parse_action({"name": "read_file", "arguments": "{not json"})
    assert calls[0].parse_error and calls[0].arguments == {}
    text, calls, _ = parse_action({"content": "thinking", "tool_calls": [{"name": "list_files", "arguments": {}}]})
    assert text == "thinking" and calls[0].name == "list_files"
    assert parse_action("```python\nx = 1\n```") == ("```python\nx = 1\n```", (), 0)
    assert parse_action(Reply("hi", usage=Usage(10, 5)))[2] == 15
    for bad in (42, {"arguments": {}}, [{"name": 3}]):
        with pytest.raises(ValueError):
            parse_action(bad)


def test_reset_gives_the_agents_skill_problem_and_tools(tmp_path):
    with env(tmp_path) as e:
        obs = e.reset(PROBLEMS / "relu.py")
        assert [m["role"] for m in obs["messages"]] == ["system", "user"]
        assert "relu" in obs["text"] and "ModelNew" in obs["text"]
        assert {t["function"]["name"] for t in obs["tools"]} == {"list_files", "read_file", "write_file", "compile", "verify",
                                                                "profile", "submit"}
        with pytest.raises(EpisodeOver):
            KernelEnv().record


@pytest.mark.timeout(3 * JUDGE_TIMEOUT_S)
def test_a_submitted_correct_candidate_earns_the_milestone_of_its_fresh_final_verdict(tmp_path):
    with env(tmp_path, reward=RewardConfig(verify_bonus=0.25)) as e:
        e.reset(PROBLEMS / "relu.py")
        obs, done, info = e.step(write(GOOD))
        assert not done and "wrote" in obs["text"]
        obs, done, info = e.step({"name": "verify", "arguments": {}})
        assert not done and "correct" in obs["text"].lower()
        obs, done, info = e.step([{"name": "submit", "arguments": {"note": "a loop"}}, {"name": "verify", "arguments": {}}])
        assert done and info["end"] == "submit" and "not run" in obs["messages"][-1]["content"]
        final = info["verdict"]
        assert final["status"] == "correct" and final["policy"]["seeds"] == "secret"  # judged afresh on secret seeds
        assert final["baseline_source"] == "measured"
        base = milestone(final)
        assert info["reward"]["milestone"] == base.milestone >= 1
        assert info["reward"]["value"] == pytest.approx(base.value + 0.25)  # one verify bonus, once
        rec = e.record
        assert rec["end"] == "submit" and rec["turns"] == 3 and rec["reward"] == info["reward"]
        assert [c["call"]["name"] for c in rec["calls"]] == ["write_file", "verify", "submit"]
        assert rec["messages"][-1]["role"] == "tool" and rec["final"]["candidate_hash"]
        heard = rec["final"]["progress"]  # the final's progress messages alone, the verify's left out
        assert heard[-1][1].startswith("verdict correct") and sum(m.startswith("verdict ") for _, m in heard) == 1
        assert all(0 <= t <= rec["final"]["seconds"] + 0.01 for t, _ in heard)
        phases = _rollout_bench().final_phases(heard, rec["final"]["seconds"])  # the bench's prefixes match the judge's words
        assert list(phases)[:7] == ["setup", "correctness", "to_timing", "timing_setup", "timing", "guards", "after_verdict"], heard
        with pytest.raises(EpisodeOver):
            e.step({"name": "list_files"})


@pytest.mark.timeout(3 * JUDGE_TIMEOUT_S)
def test_a_wrong_reply_under_reply_submits_ends_the_episode_at_minus_one(tmp_path):
    with env(tmp_path, tools=False, reply_submits=True) as e:
        obs = e.reset(PROBLEMS / "relu.py")
        assert obs["tools"] == []
        _, done, info = e.step(f"Here it is:\n```python\n{WRONG}\n```", tokens=1200)
        assert done and info["end"] == "submit" and info["verdict"]["status"] == "incorrect"
        assert info["reward"]["value"] == -1.0 and info["reward"]["milestone"] == -1
        assert e.record["tokens"] == 1200


def test_the_turn_limit_ends_an_episode_without_a_candidate_at_minus_one_and_judges_nothing(tmp_path, monkeypatch):
    from kernelwright.agent.judging import Judge

    monkeypatch.setattr(Judge, "final", lambda *a, **k: pytest.fail("nothing to judge"))
    with env(tmp_path, objective=Objective(compile_baseline=False, seeds=1, max_turns=2)) as e:
        e.reset(PROBLEMS / "relu.py")
        obs, done, _ = e.step("I would write a kernel here.")
        assert not done and "No candidate" in obs["text"]
        _, done, info = e.step({"name": "list_files", "arguments": {}})
        assert done and info["end"] == "turn limit (2)" and info["verdict"] is None
        assert info["reward"]["value"] == -1.0 and "no candidate" in info["reward"]["reason"]


def test_the_token_limit_ends_an_episode(tmp_path, monkeypatch):
    from kernelwright.agent.judging import Judge

    monkeypatch.setattr(Judge, "final", lambda *a, **k: pytest.fail("nothing to judge"))
    with env(tmp_path, objective=Objective(compile_baseline=False, seeds=1, budget_tokens=1000)) as e:
        e.reset(PROBLEMS / "relu.py")
        _, done, _ = e.step(Reply("thinking", usage=Usage(400, 100)))
        assert not done
        _, done, info = e.step(Reply("still thinking", usage=Usage(450, 100)))
        assert done and info["end"] == "token limit (1050 of 1000)"


def test_a_judge_failure_at_the_end_is_excluded_not_minus_one(tmp_path, monkeypatch):
    from kernelwright.agent.judging import Judge

    def broken(*a, **k):
        raise OSError("the device went away")

    monkeypatch.setattr(Judge, "final", broken)
    with env(tmp_path) as e:
        e.reset(PROBLEMS / "relu.py")
        e.step(write(GOOD))
        _, done, info = e.step({"name": "submit", "arguments": {}})
        # submit's own (full) judgement ran; the final one failed
        assert done and info["excluded"] and info["reward"]["value"] is None
        assert info["verdict"]["status"] == "infra_error" and "device went away" in info["verdict"]["log"]


def test_a_submit_is_judged_once_afresh_and_its_answer_is_the_final_verdict(tmp_path, monkeypatch):
    from kernelwright.agent.judging import Judge

    monkeypatch.setattr(Judge, "full", lambda *a, **k: pytest.fail("submit must not judge before the final judgement"))
    with env(tmp_path) as e:
        e.reset(PROBLEMS / "relu.py")
        e.step(write(GOOD))
        obs, done, info = e.step({"name": "submit", "arguments": {}})
        assert done and info["verdict"]["status"] == "correct"
        assert obs["messages"][-1]["role"] == "tool" and "correct" in obs["text"] and obs["text"].endswith("submitted.")
        assert e.record["messages"][-1] == obs["messages"][-1]


def test_an_infra_error_is_judged_once_more_before_it_excludes(tmp_path, monkeypatch):
    from kernelwright.agent.judging import Judge

    real, calls = Judge.final, []

    def flaky(self, path):
        calls.append(path)
        if len(calls) == 1:
            raise OSError("a passing hiccup")
        return real(self, path)

    monkeypatch.setattr(Judge, "final", flaky)
    with env(tmp_path, tools=False, reply_submits=True) as e:
        e.reset(PROBLEMS / "relu.py")
        _, done, info = e.step(f"```python\n{WRONG}\n```")
        assert len(calls) == 2 and info["verdict"]["status"] == "incorrect" and info["reward"]["value"] == -1.0


def test_a_task_that_fails_is_excluded_not_the_candidates_minus_one(tmp_path, monkeypatch):
    from kernelwright.agent.judging import Judge
    from kernelwright.problems.loader import ProblemError

    def broken(*a, **k):
        raise ProblemError("relu.py: too large for this device")

    monkeypatch.setattr(Judge, "final", broken)
    with env(tmp_path, tools=False, reply_submits=True) as e:
        e.reset(PROBLEMS / "relu.py")
        _, done, info = e.step(f"```python\n{GOOD}\n```")
        assert info["excluded"] and "the task failed" in info["verdict"]["log"]


@pytest.mark.timeout(3 * JUDGE_TIMEOUT_S)
def test_a_reply_with_code_is_judged_and_answered_when_it_does_not_submit(tmp_path):
    with env(tmp_path, tools=False) as e:
        e.reset(PROBLEMS / "relu.py")
        obs, done, _ = e.step(f"```python\n{WRONG}\n```")
        assert not done and obs["messages"][-1]["role"] == "user" and "incorrect" in obs["text"].lower()
        assert [c["status"] for c in e.record["calls"]] == ["incorrect"]


def test_tool_calls_in_an_episode_without_tools_are_answered_and_the_text_is_used(tmp_path):
    with env(tmp_path, tools=False) as e:
        e.reset(PROBLEMS / "relu.py")
        obs, done, _ = e.step({"content": "no code", "tool_calls": [{"id": "x1", "name": "verify", "arguments": {}}]})
        roles = [m["role"] for m in obs["messages"]]
        assert roles == ["tool", "user"] and obs["messages"][0]["tool_call_id"] == "x1" and "No candidate" in obs["text"]


def test_reset_and_close_end_what_was_running(tmp_path):
    e = env(tmp_path)
    e.reset(PROBLEMS / "relu.py")
    e.step(write(GOOD))
    first = e.workspace.root
    e.reset(PROBLEMS / "rowsum.py")  # a new episode: the old workspace goes, the new one is empty
    assert not first.exists() and e.workspace.list() == [] and e.task.split == "unknown"
    e.close()
    with pytest.raises(EpisodeOver):
        e.step(write(GOOD))
    assert not (tmp_path / "episodes").exists() or not any((tmp_path / "episodes").iterdir())
    with pytest.raises(Exception):
        e.reset(PROBLEMS / "missing.py")
    with pytest.raises(EpisodeOver):  # a reset that failed leaves nothing to step
        e.step(write(GOOD))
