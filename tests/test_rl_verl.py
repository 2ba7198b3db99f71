"""The verl adapter (kernelwright.rl.verl, with verl 0.9.1): parquet rows read back by verl's own
RLHFDataset, the tools built from the tool config file by verl's own loader and driven through
create/execute/calc_reward/release, the agent loop against a stub server manager (verl's tokeniser
path and tool parser, a byte-level tokenizer and a chat template built here), and compute_score.
Every reward is checked against the milestone of the verdict the judge gave."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("verl.experimental.agent_loop", reason="verl is not installed: pip install -e '.[verl]'")

from conftest import CANDIDATES, JUDGE_TIMEOUT_S, relu_tasks  # noqa: E402
from kernelwright.agent.objective import Objective  # noqa: E402
from kernelwright.rl import EnvConfig, milestone  # noqa: E402
from kernelwright.rl import verl as kv  # noqa: E402
from kernelwright.rl.tasks import task_from_payload  # noqa: E402
from kernelwright.rl.verl_data import (AGENT_NAME, config_from_dict, config_to_dict, dataset_rows, write_parquet,  # noqa: E402
                                       write_tool_config)

GOOD = (CANDIDATES / "relu_correct" / "model_new.py").read_text()
BROKEN = GOOD.replace("x[i] < 0.0f ? 0.0f : x[i]", "x[i] < 0.0f ? 0.0f : 2.0f * x[i]")
FAST = Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0, max_turns=6)
TEMPLATE = ("{% if tools %}<|system|>tools: {{ tools | tojson }}\n{% endif %}"
            "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
            "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}<eos>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture()
def tasks(tmp_path):
    return relu_tasks(tmp_path)


@pytest.fixture()
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))  # task_from_payload writes programs there
    return EnvConfig(device="cpu", objective=FAST, store=tmp_path / "store.sqlite", workroot=tmp_path / "eps")


@pytest.fixture()
def records(monkeypatch):
    """Each closed episode's record: the verdict a reward must match."""
    from kernelwright.rl.env import KernelEnv

    seen, close = [], KernelEnv.close

    def keep(self):
        if getattr(self, "_episode", None) is not None and self.done and "final" in self._episode:
            seen.append(self.record)
        close(self)

    monkeypatch.setattr(KernelEnv, "close", keep)
    return seen


def _tokenizer():
    """Bytes as tokens (any text round-trips), two special tokens, and a chat template with tools."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    t = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    t.chat_template = TEMPLATE
    return t


def _call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call><eos>"


def test_config_round_trips_and_unknown_settings_are_named(config):
    assert config_from_dict(json.loads(json.dumps(config_to_dict(config)))) == config
    with pytest.raises(ValueError, match="unknown environment settings"):
        config_from_dict({"devcie": "cpu"})


def test_parquet_rows_read_back_as_verl_reads_them(tmp_path, tasks, config):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    path = write_parquet(dataset_rows(tasks, config), tmp_path / "train.parquet")
    data = RLHFDataset(data_files=[str(path)], tokenizer=_tokenizer(), processor=None,
                       config=OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 100_000, "cache_dir": str(tmp_path / "vc")}))
    assert len(data) == 1
    row = data[0]
    assert row["agent_name"] == AGENT_NAME and row["data_source"] == "kernelwright"
    assert row["raw_prompt"][0]["role"] == "system" and "relu" in row["raw_prompt"][1]["content"]
    payload = row["tools_kwargs"]["kernelwright"]["task"]
    assert payload == row["reward_model"]["ground_truth"]
    task = task_from_payload(payload)
    assert (task.id, task.split, task.problem.hash) == (tasks[0].id, tasks[0].split, tasks[0].problem.hash)
    with pytest.raises(Exception, match="does not match its hash"):
        task_from_payload(payload.replace("relu", "relv"))


def _tools(tmp_path, config):
    from verl.tools.tool_registry import initialize_tools_from_config

    tools = initialize_tools_from_config(str(write_tool_config(tmp_path / "kernelwright_tools.yaml", config)))
    return {t.name: t for t in tools}


@pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)
def test_the_tools_cycle_create_execute_calc_reward_release(tmp_path, tasks, config):
    tools = _tools(tmp_path, config)
    assert sorted(tools) == sorted(["list_files", "read_file", "write_file", "compile", "verify", "profile", "submit"])
    assert tools["write_file"].tool_schema.function.parameters.required == ["path", "content"]
    payload = dataset_rows(tasks, config)[0]["reward_model"]["ground_truth"]

    async def episode(code):
        iid = "trajectory-1"
        for t in tools.values():  # the caller shares one instance id between the tools of a trajectory
            assert (await t.create(iid, create_kwargs={"task": payload}))[0] == iid
        text, reward, _ = await tools["write_file"].execute(iid, {"path": "model_new.py", "content": code})
        assert "wrote" in text.text and reward == 0.0
        verify = (await tools["verify"].execute(iid, {}))[0].text
        text, _, metrics = await tools["submit"].execute(iid, {"note": "a loop"})
        assert metrics["done"] and "submitted." in text.text
        assert "episode is over" in (await tools["verify"].execute(iid, {}))[0].text
        ep = kv._BY_INSTANCE[iid]
        value = await tools["submit"].calc_reward(iid)
        verdict = ep.env.record["final"]["verdict"]
        for t in tools.values():
            await t.release(iid)
        assert iid not in kv._BY_INSTANCE and ep.env.done
        return verify, value, verdict

    verify, value, verdict = asyncio.run(episode(GOOD))
    assert "incorrect" not in verify.lower() and value == milestone(verdict).value >= 1
    _, value, verdict = asyncio.run(episode(BROKEN))
    assert verdict["status"] == "incorrect" and value == -1.0


def _loop(tmp_path, config, replies, max_assistant_turns=4, cls=None, **extra):
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.workers.rollout.replica import TokenOutput

    tok = _tokenizer()
    calls = []

    class StubServer:  # verl's server manager as the agent loop calls it: prompt ids in, token ids out
        async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
            calls.append(tok.decode(prompt_ids))
            return TokenOutput(token_ids=tok.encode(replies[len(calls) - 1], add_special_tokens=False), log_probs=None)

    rollout = {"prompt_length": 200_000, "response_length": 200_000, "full_determinism": False,
               "multi_turn": {"max_user_turns": 8, "max_assistant_turns": max_assistant_turns, "max_parallel_calls": 1,
                              "max_tool_response_length": 100_000, "tool_response_truncate_side": "middle", "format": "hermes"}}
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "data": {}})
    tools = ToolListWrap(list(_tools(tmp_path, config).values()))

    def make():  # inside the event loop, as verl's worker makes one per trajectory (the loop keeps the running event loop)
        return (cls or kv.KernelAgentLoop)(trainer_config=DictConfigWrap(cfg), server_manager=StubServer(), tokenizer=tok, processor=None,
                                  dataset_cls=None, data_config=DictConfigWrap(cfg.data), tools=tools, **extra)
    return make, tok, calls


def _run(make, row):
    async def go():
        return await make().run({"temperature": 1.0}, raw_prompt=row["prompt"], tools_kwargs=row["extra_info"]["tools_kwargs"],
                                extra_info=row["extra_info"])
    return asyncio.run(go())


@pytest.mark.timeout(6 * JUDGE_TIMEOUT_S)
def test_the_agent_loop_runs_an_episode_and_pays_the_final_verdicts_milestone(tmp_path, tasks, config, records):
    row = dataset_rows(tasks, config)[0]
    replies = [_call("write_file", path="model_new.py", content=GOOD), _call("submit", note="a loop"), _call("verify")]
    loop, tok, calls = _loop(tmp_path, config, replies)
    out = _run(loop, row)
    assert len(calls) == 2  # the submit ended the trajectory: no third generation
    state = out.extra_fields["kernelwright"]
    assert state["done"] and state["end"] == "submit" and state["status"] == "correct"
    assert out.reward_score == state["reward"]["value"] == milestone(records[-1]["final"]["verdict"]).value >= 1
    text = tok.decode(out.response_ids)
    assert "wrote" in text and "submitted." in text  # the tool answers are in the response
    generated = [i for i, m in zip(out.response_ids, out.response_mask) if m == 1]
    assert tok.decode(generated) == replies[0] + replies[1]  # the mask marks the policy's tokens, and only those
    assert 0 in out.response_mask and out.extra_fields["kernelwright_excluded"] is False  # the flag is on every output

    loop, _, calls = _loop(tmp_path, config, [_call("write_file", path="model_new.py", content=BROKEN), _call("submit")])
    out = _run(loop, row)
    assert out.extra_fields["kernelwright"]["status"] == "incorrect" and out.reward_score == -1.0

    # verl's own turn limit ends it first: the workspace's candidate is judged finally all the same
    # (its second reply's verify is never run: verl stops at the turn limit before it calls tools)
    loop, _, calls = _loop(tmp_path, config, [_call("write_file", path="model_new.py", content=GOOD), _call("verify")], max_assistant_turns=2)
    out = _run(loop, row)
    state = out.extra_fields["kernelwright"]
    assert len(calls) == 2 and state["end"] == "verl's limits ended the trajectory" and state["status"] == "correct"
    assert out.reward_score == milestone(records[-1]["final"]["verdict"]).value >= 1


def test_a_task_that_fails_is_excluded_with_no_token_trained_on(tmp_path, tasks, config):
    row = dataset_rows(tasks, config)[0]
    payload = json.loads(row["reward_model"]["ground_truth"])
    bad = "import torch\nclass Model(torch.nn.Module):\n    pass\n"  # no get_inputs: not a problem
    import hashlib

    payload.update(program=bad, hash=hashlib.sha256(bad.encode()).hexdigest())
    row["extra_info"]["tools_kwargs"] = {"kernelwright": {"task": json.dumps(payload)}}
    loop, tok, calls = _loop(tmp_path, config, [_call("verify")])
    out = _run(loop, row)
    assert calls == [] and out.reward_score == 0.0 and out.extra_fields["kernelwright_excluded"] is True
    assert out.response_ids == [tok.eos_token_id] and out.response_mask == [0]  # one masked token, not the prompt
    assert len(out.prompt_ids) > 1000


@pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)
def test_an_infra_error_at_the_final_judgement_is_excluded_and_masked(tmp_path, tasks, config, monkeypatch):
    from kernelwright.agent.judging import Judge

    def broken(self, *a, **k):
        raise RuntimeError("the judge's worker went away")

    monkeypatch.setattr(Judge, "final", broken)
    row = dataset_rows(tasks, config)[0]
    loop, _, calls = _loop(tmp_path, config, [_call("write_file", path="model_new.py", content=BROKEN), _call("submit")])
    out = _run(loop, row)
    state = out.extra_fields["kernelwright"]
    assert len(calls) == 2 and state["status"] == "infra_error" and state["excluded"] and out.reward_score == 0.0
    assert out.extra_fields["kernelwright_excluded"] is True and out.response_mask and set(out.response_mask) == {0}


@pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)
def test_the_single_turn_loop_pays_the_answers_fenced_code(tmp_path, tasks, config, records):
    from omegaconf import OmegaConf

    rows = dataset_rows(tasks, config, tools=False)
    assert rows[0]["agent_name"] == "kernelwright_single_turn"
    settings = OmegaConf.create(config_to_dict(config))  # as Hydra hands it over: nested DictConfigs
    loop, tok, _ = _loop(tmp_path, config, [f"Here:\n```python\n{GOOD}\n```<eos>"], cls=kv.KernelSingleTurnLoop, settings=settings)
    out = _run(loop, rows[0])
    assert out.extra_fields["kernelwright"]["status"] == "correct" and out.extra_fields["kernelwright_excluded"] is False
    assert out.reward_score == milestone(records[-1]["final"]["verdict"]).value >= 1 and set(out.response_mask) == {1}
    loop, _, _ = _loop(tmp_path, config, ["I would write a kernel.<eos>"], cls=kv.KernelSingleTurnLoop, settings=settings)
    assert _run(loop, rows[0]).reward_score == -1.0


@pytest.mark.timeout(6 * JUDGE_TIMEOUT_S)
def test_compute_score_single_turn_episode_state_and_unsubmitted_files(tmp_path, tasks, config, records):
    row = dataset_rows(tasks, config)[0]
    gt, settings = row["reward_model"]["ground_truth"], config_to_dict(config)
    good = kv.compute_score("kernelwright", f"Here it is.\n```python\n{GOOD}\n```", gt, {}, **settings)
    assert good["status"] == "correct" and good["score"] == milestone(records[-1]["final"]["verdict"]).value >= 1
    assert not good["kernelwright_excluded"]
    assert kv.compute_score("kernelwright", "no code here", gt, {}, **settings)["score"] == -1.0
    broken = kv.compute_score("kernelwright", "", gt, {"kernelwright": {"done": False, "files": {"model_new.py": BROKEN}}}, **settings)
    assert broken["status"] == "incorrect" and broken["score"] == -1.0
    done = {"done": True, "status": "correct", "reward": {"value": 2.0, "milestone": 2, "reason": "r"}}
    assert kv.compute_score("kernelwright", "", gt, {"kernelwright": done})["score"] == 2.0  # the episode's own reward
    with pytest.raises(ValueError, match="data_source"):
        kv.compute_score("gsm8k", "", gt, {})
    # the tools started an episode but nothing was written: -1, and the text's code is not taken instead
    fenced = f"```python\n{GOOD}\n```"
    assert kv.compute_score("kernelwright", fenced, gt, {"kernelwright": {"done": False, "files": {}}}, **settings)["score"] == -1.0
    # a task that fails is excluded, not a crash of the reward worker
    bad = json.loads(gt)
    bad.update(program="x = 1\n", hash=__import__("hashlib").sha256(b"x = 1\n").hexdigest())
    failed = kv.compute_score("kernelwright", fenced, json.dumps(bad), {}, **settings)
    assert failed["kernelwright_excluded"] and failed["score"] == 0.0


@pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)
def test_verls_own_tool_loop_with_these_tools_is_paid_by_compute_score(tmp_path, tasks, config, records):
    """Without the kernelwright agent loop: verl's ToolAgentLoop calls the tools (create, execute,
    release per call) and the episode's state reaches compute_score through extra_fields."""
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    row = dataset_rows(tasks, config)[0]
    replies = [_call("write_file", path="model_new.py", content=GOOD), _call("submit"), "All done.<eos>"]
    loop, _, calls = _loop(tmp_path, config, replies, cls=ToolAgentLoop)
    out = _run(loop, row)
    assert len(calls) == 3 and out.reward_score is None  # verl's loop leaves the reward to compute_score
    state = out.extra_fields["kernelwright"]
    assert state["done"] and state["end"] == "submit"
    scored = kv.compute_score("kernelwright", "All done.", row["reward_model"]["ground_truth"], {**row["extra_info"], **out.extra_fields})
    assert scored["score"] == milestone(records[-1]["final"]["verdict"]).value >= 1 and scored["judged"] == "the episode's own"


def test_export_verl_writes_what_verl_loads(tmp_path, tasks, capsys):
    from omegaconf import OmegaConf

    from kernelwright.cli import main

    out = tmp_path / "verl"
    with pytest.raises(SystemExit, match="0"):
        main(["rl", "export-verl", "--tasks", str(tasks[0].problem.path.parent), "--heldout", "0", "--device", "cpu", "--out", str(out),
              "--max-turns", "5", "--store", str(tmp_path / "s.sqlite"), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["rows"] == {"train": 1, "test": 0} and not (out / "test.parquet").exists()
    tools = _tools_from(out / "kernelwright_tools.yaml")
    assert len(tools) == 7 and all(t.env_config.objective.max_turns == 5 and t.env_config.device == "cpu" for t in tools)
    loops = {c.name: c for c in OmegaConf.load(out / "kernelwright_agent_loop.yaml")}
    assert loops[AGENT_NAME]._target_ == "kernelwright.rl.verl.KernelAgentLoop"
    assert loops["kernelwright_single_turn"].settings.objective.max_turns == 5
    import pyarrow.parquet as pq

    (row,) = pq.read_table(out / "train.parquet").to_pylist()
    assert row["agent_name"] == AGENT_NAME and task_from_payload(row["reward_model"]["ground_truth"]).id == tasks[0].id


def _tools_from(path):
    from verl.tools.tool_registry import initialize_tools_from_config

    return initialize_tools_from_config(str(path))


def test_export_verl_single_turn_rows_and_refusals(tmp_path, tasks, capsys):
    import pyarrow.parquet as pq

    from kernelwright.cli import main

    out = tmp_path / "verl"
    (out).mkdir()
    (out / "test.parquet").write_text("an older export's")
    with pytest.raises(SystemExit, match="0"):
        main(["rl", "export-verl", "--tasks", str(tasks[0].problem.path.parent), "--heldout", "0", "--device", "cpu", "--out", str(out),
              "--no-tools", "--store", str(tmp_path / "s.sqlite")])
    (row,) = pq.read_table(out / "train.parquet").to_pylist()
    assert row["agent_name"] == "kernelwright_single_turn" and not (out / "test.parquet").exists()
    assert not (out / "kernelwright_tools.yaml").exists()
    with pytest.raises(SystemExit, match="2"):
        main(["rl", "export-verl", "--tasks", str(tasks[0].problem.path.parent), "--device", "cpu", "--out", str(out), "--budget-tokens", "100"])
    assert "not counted under verl" in capsys.readouterr().err
