"""The TRL adapter (kernelwright.rl.trl): the environment's tool cycle as GRPOTrainer calls it, and a
GRPO run of two optimizer steps on a tiny randomly initialised causal LM (built from a config,
tokenizer built here, nothing downloaded) whose reward is KernelEnv's milestone on the CPU backend.

A random model writes no code, so its generation is steered: its vocabulary holds two whole-answer
tokens, one decoding to a known-good candidate and one to a broken one, and every other token is
suppressed; the completion is one token. Each reward must equal the milestone of the verdict the
judge gave that completion, the groups must mix good and broken (rewards that differ, so
advantages that are not all zero), and the parameters must change. A second run goes through
`environment_factory`: multi-turn, with TRL parsing the model's tool calls and calling the
environment's methods."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[rl]'")

from conftest import CANDIDATES, JUDGE_TIMEOUT_S, relu_tasks  # noqa: E402
from kernelwright.agent.objective import Objective  # noqa: E402
from kernelwright.rl import EnvConfig, milestone  # noqa: E402
from kernelwright.rl.trl import dataset_rows, environment_factory, reward_function  # noqa: E402

GOOD = (CANDIDATES / "relu_correct" / "model_new.py").read_text()
BROKEN = GOOD.replace("x[i] < 0.0f ? 0.0f : x[i]", "x[i] < 0.0f ? 0.0f : 2.0f * x[i]")
FAST = Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0, max_turns=6)


@pytest.fixture()
def tasks(tmp_path):
    return relu_tasks(tmp_path)


def _config(tmp_path):
    return EnvConfig(device="cpu", objective=FAST, store=tmp_path / "store.sqlite", workroot=tmp_path / "eps")


@pytest.mark.timeout(3 * JUDGE_TIMEOUT_S)
def test_the_environment_factory_gives_tools_trl_can_describe_and_a_reward(tmp_path, tasks):
    from transformers.utils import get_json_schema

    make = environment_factory(tasks, _config(tmp_path))
    env = make()
    tools = [m for m in ("list_files", "read_file", "write_file", "compile", "verify", "profile", "submit")]
    for name in tools:
        schema = get_json_schema(getattr(env, name))  # what TRL renders into the prompt; raises on a missing docstring
        assert schema["function"]["name"] == name and schema["function"]["description"]
    (row,) = dataset_rows(tasks, _config(tmp_path))
    assert row["prompt"][0]["role"] == "system" and "relu" in row["prompt"][1]["content"]
    assert env.reset(**row) is None
    assert "wrote" in env.write_file("model_new.py", GOOD)
    assert "incorrect" not in env.verify().lower()  # its feedback on a correct candidate
    assert "submitted." in env.submit("a loop")
    assert "episode is over" in env.verify()
    reward = env.get_reward()
    assert reward == milestone(env.record["final"]["verdict"]).value >= 1
    assert env.reset(**row) is None  # TRL pools instances: the same one starts the next rollout afresh
    assert "no files yet" in env.list_files()
    assert env.get_reward() == -1.0 and env.record["end"] == "ended by the trainer"  # ended without a submit, nothing to judge
    assert make().get_reward() is None  # never reset: no episode, nothing to pay


def _tiny_model_and_tokenizer():
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<pad>", "<eos>", "<unk>", f"```python\n{GOOD}\n```", f"```python\n{BROKEN}\n```"] + [f"w{i}" for i in range(27)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=4096, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return LlamaForCausalLM(config), tokenizer, (3, 4), len(words)


@pytest.mark.timeout(6 * JUDGE_TIMEOUT_S)
def test_a_grpo_run_of_two_steps_is_paid_the_verdicts_milestones(tmp_path, tasks, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer, (good, broken), vocab = _tiny_model_and_tokenizer()
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    seen: list[dict] = []
    reward = reward_function(tasks, _config(tmp_path), on_episode=seen.append)
    rows = dataset_rows(tasks, _config(tmp_path), tools=False, conversational=False) * 2
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=4, num_generations=4, max_completion_length=1,
                      max_steps=2, learning_rate=0.05, beta=0.0, logging_steps=1, report_to="none", use_cpu=True, seed=3,
                      save_strategy="no", temperature=1.0,
                      generation_kwargs={"suppress_tokens": [i for i in range(vocab) if i not in (good, broken)]})
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    trainer.train()
    assert len(seen) == 8  # 2 steps x one group of 4
    for rec in seen:
        assert rec["reward"]["value"] == milestone(rec["final"]["verdict"]).value
    statuses = [rec["final"]["verdict"]["status"] for rec in seen]
    assert set(statuses) == {"correct", "incorrect"}, statuses
    logs = [h for h in trainer.state.log_history if "reward_std" in h]
    assert len(logs) == 2 and all(h["reward_std"] > 0 for h in logs), logs  # every group mixed: advantages not all zero
    changed = [k for k, v in model.named_parameters() if not v.detach().equal(before[k])]
    assert changed, "no parameter changed"


QWEN_LIKE = ("{%- if tools %}<|im_start|>system tools{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}"
             "{%- for m in messages %}"
             "{%- if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
             "{%- for c in (m.tool_calls or []) %}<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>"
             "{%- endfor %}<|im_end|>\n"
             "{%- elif m.role == 'tool' %}<|im_start|>tool\n{{ m.content }}<|im_end|>\n"
             "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif %}"
             "{%- endfor %}"
             "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _action(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.mark.timeout(10 * JUDGE_TIMEOUT_S)
def test_a_multi_turn_grpo_run_through_the_environment_factory(tmp_path, tasks, monkeypatch):
    """GRPOTrainer(environment_factory=...) itself: TRL renders the tools, parses the model's tool
    calls (TRL's own Qwen-style response schema), calls the environment's methods and pays
    get_reward. Generation is steered to three whole-action tokens (write the good candidate, write
    the broken one, submit) and the end-of-turn token; the episodes are whatever the random model
    strings together, and each is paid its final verdict's milestone."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_schema

    from kernelwright.rl.trl import KernelToolEnv

    words = ["<pad>", "<unk>", "<|im_end|>"] + [f"w{i}" for i in range(29)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|im_end|>", unk_token="<unk>", padding_side="left")
    actions = [_action("write_file", path="model_new.py", content=GOOD), _action("write_file", path="model_new.py", content=BROKEN),
               _action("submit")]
    tokenizer.add_tokens(actions)
    allowed = [tokenizer.convert_tokens_to_ids(a) for a in actions] + [tokenizer.eos_token_id]
    tokenizer.chat_template, tokenizer.response_schema = QWEN_LIKE, qwen3_schema
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=1 << 16, pad_token_id=0, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}

    seen: list[tuple[float | None, dict]] = []
    by_id = {t.id: t for t in tasks}

    class Recording(KernelToolEnv):
        def get_reward(self) -> float | None:
            value = super().get_reward()
            seen.append((value, self.record))
            return value

    rows = dataset_rows(tasks, _config(tmp_path)) * 2
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=4, num_generations=4, max_completion_length=4096,
                      max_tool_calling_iterations=3, max_steps=2, learning_rate=0.05, beta=0.0, logging_steps=1, report_to="none",
                      use_cpu=True, seed=3, save_strategy="no", temperature=1.0,
                      generation_kwargs={"suppress_tokens": [i for i in range(len(tokenizer)) if i not in allowed]})
    trainer = GRPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          environment_factory=lambda: Recording(by_id, _config(tmp_path)))
    trainer.train()
    assert len(seen) == 8, len(seen)  # 2 steps x one group of 4
    for value, rec in seen:
        verdict = rec["final"]["verdict"]
        assert value == (milestone(verdict).value if verdict else -1.0), rec["end"]
    names = [c["call"]["name"] for _, rec in seen for c in rec["calls"]]
    assert "write_file" in names and "submit" in names  # the tools were called through TRL's parser
    assert any(len({c["turn"] for c in rec["calls"]}) >= 2 for _, rec in seen)  # at least one episode made several tool calls
    logs = [h for h in trainer.state.log_history if "reward_std" in h]
    assert len(logs) == 2 and all(h["reward_std"] > 0 for h in logs), logs
    for step, h in enumerate(logs):  # what TRL trained on is what the environment paid
        assert float(h["reward"]) == pytest.approx(sum(v for v, _ in seen[4 * step:4 * step + 4]) / 4)
    changed = [k for k, v in model.named_parameters() if not v.detach().equal(before[k])]
    assert changed, "no parameter changed"
