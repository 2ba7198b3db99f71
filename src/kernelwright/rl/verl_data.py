"""What verl reads, written without verl: the dataset's parquet rows, the tools' config file and the
environment's settings as plain data (rl.verl holds the classes that import verl).

    kernelwright rl export-verl --tasks builtin --device cuda --out data/     # train.parquet, test.parquet, kernelwright_tools.yaml

A row carries its task as data (`task_payload`: the program's text and hash, never a path), so a
rollout worker on another node needs no file of ours: `extra_info.tools_kwargs.kernelwright.task`
for the tools and the agent loop, and `reward_model.ground_truth` (the same JSON) for
`compute_score`. `agent_name` picks the agent loop (`kernelwright`, registered by rl.verl).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from kernelwright.agent.objective import Objective
from kernelwright.agent.tools import TOOL_SPECS
from kernelwright.rl.env import EnvConfig
from kernelwright.rl.reward import RewardConfig
from kernelwright.rl.tasks import Task, task_payload
from kernelwright.rl.trl import dataset_rows as _prompt_rows

AGENT_NAME = "kernelwright"  # the agent loop's registered name
SINGLE_TURN = "kernelwright_single_turn"  # the single-turn loop's: one answer, its fenced model_new.py judged
DATA_SOURCE = "kernelwright"  # the rows' data_source; compute_score refuses others
TOOL_CLASSES = {"list_files": "ListFilesTool", "read_file": "ReadFileTool", "write_file": "WriteFileTool", "compile": "CompileTool",
                "verify": "VerifyTool", "profile": "ProfileTool", "submit": "SubmitTool"}


def config_to_dict(config: EnvConfig) -> dict[str, Any]:
    """An EnvConfig as the plain data a YAML file or a reward's kwargs can hold."""
    d = {"device": config.device, "objective": config.objective.to_dict(), "reward": asdict(config.reward), "tools": config.tools,
         "reply_submits": config.reply_submits, "record": config.record, "keep_workspaces": config.keep_workspaces}
    d["reward"]["clip"] = list(config.reward.clip)
    for key in ("store", "workroot"):
        if getattr(config, key) is not None:
            d[key] = str(getattr(config, key))
    return d


def _plain(x: Any) -> Any:
    """Mappings and sequences as dicts and lists: Hydra hands over its own containers."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        return [_plain(v) for v in x]
    return x


def config_from_dict(d: dict[str, Any] | None) -> EnvConfig:
    """The EnvConfig of `config_to_dict`'s data; unknown keys are an error, not silently dropped.
    verl's own keys in a tool's config (`type`) are left to verl."""
    d = {k: v for k, v in _plain(d or {}).items() if k != "type"}
    known = {f.name for f in fields(EnvConfig)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown environment settings {unknown}; known: {sorted(known)}")
    if isinstance(d.get("objective"), dict):
        d["objective"] = Objective.from_dict(d["objective"])
    if isinstance(d.get("reward"), dict):
        r = dict(d["reward"])
        if "clip" in r:
            r["clip"] = tuple(r["clip"])
        d["reward"] = RewardConfig(**r)
    for key in ("store", "workroot"):
        if d.get(key) is not None:
            d[key] = Path(d[key]).expanduser()
    return EnvConfig(**d)


def dataset_rows(tasks: list[Task], config: EnvConfig | None = None, *, tools: bool = True) -> list[dict[str, Any]]:
    """verl's rows, one per task: `prompt` (the skill and the problem, the environment's own
    messages), `data_source`, `agent_name`, `reward_model.ground_truth` and `extra_info` (the task's
    id and split, and `tools_kwargs` with the task for the tools)."""
    config = config or EnvConfig()
    rows = []
    for i, (task, base) in enumerate(zip(tasks, _prompt_rows(tasks, config, tools=tools))):
        payload = json.dumps(task_payload(task), sort_keys=True)
        rows.append({"data_source": DATA_SOURCE, "agent_name": AGENT_NAME if tools else SINGLE_TURN, "prompt": base["prompt"],
                     "ability": "kernels", "reward_model": {"style": "rule", "ground_truth": payload},
                     "extra_info": {"index": i, "task_id": task.id, "split": task.split, "need_tools_kwargs": True,
                                    "tools_kwargs": {"kernelwright": {"task": payload}}}})
    return rows


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """The rows as one parquet file (pyarrow), written whole then moved into place."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"{path}: no rows to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)
    return path


def tool_config(config: EnvConfig | None = None) -> dict[str, Any]:
    """verl's tool config (`actor_rollout_ref.rollout.multi_turn.tool_config_path`): the seven tools,
    each with the environment's settings. Their schemas come from the tools themselves."""
    settings = {"type": "native", **config_to_dict(config or EnvConfig())}
    return {"tools": [{"class_name": f"kernelwright.rl.verl.{cls}", "config": settings} for cls in TOOL_CLASSES.values()]}


def agent_loop_config(config: EnvConfig | None = None) -> list[dict[str, Any]]:
    """verl's agent-loop config (`actor_rollout_ref.rollout.agent.agent_loop_config_path`): both
    loops by name; the single-turn one takes the environment's settings here (the multi-turn one
    takes them from its tools)."""
    return [{"name": AGENT_NAME, "_target_": "kernelwright.rl.verl.KernelAgentLoop"},
            {"name": SINGLE_TURN, "_target_": "kernelwright.rl.verl.KernelSingleTurnLoop", "settings": config_to_dict(config or EnvConfig())}]


def write_agent_loop_config(path: Path, config: EnvConfig | None = None) -> Path:
    return _write_yaml(path, "agent loops", "actor_rollout_ref.rollout.agent.agent_loop_config_path", agent_loop_config(config))


def write_tool_config(path: Path, config: EnvConfig | None = None) -> Path:
    return _write_yaml(path, "tools", "actor_rollout_ref.rollout.multi_turn.tool_config_path", tool_config(config))


def _write_yaml(path: Path, what: str, setting: str, data: Any) -> Path:
    """Data as YAML (JSON is YAML; no YAML writer needed), headed by the verl setting that reads it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# kernelwright's {what} for verl: {setting}\n" + json.dumps(data, indent=2) + "\n")
    return path


assert set(TOOL_CLASSES) == {s.name for s in TOOL_SPECS}, "every agent tool has a verl class"
