"""verl adapter (verl 0.9.1): the agent loops `kernelwright` and `kernelwright_single_turn`, the seven
tools as BaseTool classes, and `compute_score`. This is the only module that imports verl; the rows
and config files it reads are written by rl.verl_data without it. docs/rl.md has the trainer's
settings.

- Tools (`WriteFileTool`, `VerifyTool`, ..., `SubmitTool`): each call is one step of the trajectory's
  KernelEnv. verl's ToolAgentLoop calls create/execute/release around every single call, so the
  episode lives with the trajectory (on verl's AgentData, passed to execute as `agent_data`), not
  with a tool instance. Called without `agent_data`, the episode lives under the instance id, which
  the caller then shares between the tools (create, execute..., calc_reward, release).
  The task comes from the row (`extra_info.tools_kwargs.kernelwright.task`, or a tool's create_kwargs).
  After each call the trajectory's `extra_fields["kernelwright"]` says where the episode stands
  (the reward once it is over; the workspace's files while it is not), which verl hands to
  compute_score as part of `extra_info`.
- `KernelAgentLoop` (`agent_name: kernelwright`): verl's own tool loop (its tokenisation, its tool
  parser, its limits) with the episode opened at the first turn, the trajectory ended by a submit,
  and, when verl's limits end it first, the workspace's candidate judged finally. It sets the
  reward itself, so compute_score is not called for its trajectories.
- `KernelSingleTurnLoop` (`agent_name: kernelwright_single_turn`): verl's single-turn loop, the
  answer's fenced model_new.py judged finally and the reward set the same way.
- `compute_score(data_source, solution_str, ground_truth, extra_info)`: for verl's own loops (a
  `tool_agent` trajectory that used these tools, or a `single_turn_agent` answer).

Every reward is the environment's (rl.reward): a final verdict on fresh secret seeds. An excluded
episode (`infra_error`, a task that fails) has no reward; verl needs a number, so it gets 0.0 with
`kernelwright_excluded` set. The kernelwright loops also zero its response mask, so that no token of
it is in the loss (verl's GRPO still counts the 0.0 in its group's mean and spread); verl's own
loops, paid through compute_score, cannot.

Judging happens in the agent-loop worker's process (compute_score: in verl's reward workers) through
the judge's client: on a GPU, give those processes a GPU the trainer and the inference server do not
use (see rl.trl's note). Environment calls run on threads of their own (KERNELWRIGHT_RL_THREADS,
default 64), never on the executor verl tokenises on.
"""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import Any, Optional
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.experimental.agent_loop.tool_agent_loop import AgentState, ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from kernelwright.agent.tools import TOOL_SPECS
from kernelwright.problems.loader import ProblemError
from kernelwright.rl.env import EnvConfig, KernelEnv
from kernelwright.rl.tasks import task_from_payload
from kernelwright.rl.verl_data import AGENT_NAME, DATA_SOURCE, SINGLE_TURN, config_from_dict

KEY = "kernelwright"  # the extra_fields / tools_kwargs key
OVER = "The episode is over: the candidate was submitted or a limit was reached."
_BY_INSTANCE: dict[str, "_Episode"] = {}  # episodes of callers that pass no agent_data
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    """The environments' own threads: a judgement blocks for seconds to minutes, and on the event
    loop's default executor it would hold up verl's tokenisation, which runs there too."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=int(os.environ.get("KERNELWRIGHT_RL_THREADS", "64")), thread_name_prefix="kw-rl")
    return _POOL


async def _off(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(_pool(), partial(fn, *args))


class _Episode:
    """One trajectory's environment, opened on its first call; its calls run one at a time."""

    def __init__(self, config: EnvConfig, payload: Any) -> None:
        if payload is None:
            raise ValueError("no task: the row's extra_info.tools_kwargs.kernelwright.task (or create_kwargs.task) is missing")
        self.env, self.payload, self.lock, self.started, self.users = KernelEnv(config), payload, asyncio.Lock(), False, 0

    async def start(self) -> None:
        if not self.started:
            self.started = True
            await _off(lambda: self.env.reset(task_from_payload(self.payload)))

    async def step(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """The call's answer, its metrics and the episode's state after it."""
        async with self.lock:
            await self.start()
            if self.env.done:
                return OVER, {"done": True}, await _off(self.state)

            def run() -> tuple[str, dict[str, Any], dict[str, Any]]:
                obs, done, info = self.env.step({"name": name, "arguments": arguments})
                metrics = {"done": done, "turn": info["turn"], **({"reward": info["reward"]["value"]} if done else {})}
                return obs["text"], metrics, self.state()
            return await _off(run)

    async def finish(self, reason: str) -> None:
        async with self.lock:
            await self.start()
            if not self.env.done:
                await _off(self.env.finish, reason)

    def state(self) -> dict[str, Any]:
        """What the trajectory carries to compute_score: the reward once over, else the files."""
        env = self.env
        if not self.started or getattr(env, "_episode", None) is None:
            return {"done": False, "files": {}}
        if env.done:
            rec = env.record
            verdict = (rec.get("final") or {}).get("verdict") or {}
            return {"done": True, "task_id": rec["task"]["id"], "split": rec["task"]["split"], "end": rec.get("end"),
                    "status": verdict.get("status"), "reward": rec["reward"], "excluded": rec["excluded"]}
        try:
            files = env.workspace.files()
        except ValueError as exc:  # a candidate the judge cannot read either (over the size limit)
            return {"done": False, "task_id": env.task.id, "split": env.task.split, "files": None, "unreadable": str(exc)[:500]}
        return {"done": False, "task_id": env.task.id, "split": env.task.split, "files": files}

    def close(self) -> None:
        self.env.close()


def _episode_of(agent_data: Any, instance_id: str | None, config: EnvConfig, create_kwargs: dict[str, Any]) -> _Episode:
    if agent_data is not None:
        ep = getattr(agent_data, "_kernelwright_episode", None)
        if ep is None:
            payload = ((getattr(agent_data, "tools_kwargs", None) or {}).get(KEY) or {}).get("task", create_kwargs.get("task"))
            ep = _Episode(config, payload)
            agent_data._kernelwright_episode = ep  # set before any await: parallel calls of one turn share it
        return ep
    if instance_id not in _BY_INSTANCE:
        raise ValueError(f"no tool instance {instance_id!r}: call create() first")
    return _BY_INSTANCE[instance_id]


class KernelTool(BaseTool):
    """One of the agent's tools; `TOOL` names it. Its config is the environment's settings
    (rl.verl_data.config_to_dict) beside verl's `type: native`."""

    TOOL = ""

    def __init__(self, config: dict, tool_schema: Optional[OpenAIFunctionToolSchema] = None) -> None:
        self.env_config = config_from_dict(config)
        self._create_kwargs: dict[str, dict[str, Any]] = {}
        super().__init__(config, tool_schema)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        spec = next(s for s in TOOL_SPECS if s.name == self.TOOL)
        return OpenAIFunctionToolSchema.model_validate(spec.to_openai())

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        create_kwargs = dict(kwargs.get("create_kwargs") or {})
        self._create_kwargs[instance_id] = create_kwargs
        if kwargs.get("agent_data") is None and create_kwargs.get("task") is not None:  # the shared-instance cycle
            ep = _BY_INSTANCE.get(instance_id) or _Episode(self.env_config, create_kwargs["task"])
            ep.users += 1
            _BY_INSTANCE[instance_id] = ep
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        agent_data = kwargs.get("agent_data")
        ep = _episode_of(agent_data, instance_id, self.env_config, self._create_kwargs.get(instance_id, {}))
        text, metrics, state = await ep.step(self.name, dict(parameters or {}))
        if agent_data is not None:
            agent_data.extra_fields[KEY] = state
            if metrics.get("done"):  # over: its workspace goes now (see docs/rl.md for one that never submits)
                await _off(ep.close)
        return ToolResponse(text=text), 0.0, metrics  # shaping is in the episode's reward, paid only for a correct final

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The episode's reward, ending it first (as a limit would) when it is not over; 0.0 for an
        excluded episode."""
        ep = _episode_of(kwargs.get("agent_data"), instance_id, self.env_config, self._create_kwargs.get(instance_id, {}))
        await ep.finish("reward asked before a submit")
        value = ep.env.get_reward().value
        return 0.0 if value is None else float(value)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._create_kwargs.pop(instance_id, None)
        ep = _BY_INSTANCE.get(instance_id)
        if ep is not None and kwargs.get("agent_data") is None:
            ep.users -= 1
            if ep.users <= 0:
                _BY_INSTANCE.pop(instance_id, None)
                ep.close()


class ListFilesTool(KernelTool):
    TOOL = "list_files"


class ReadFileTool(KernelTool):
    TOOL = "read_file"


class WriteFileTool(KernelTool):
    TOOL = "write_file"


class CompileTool(KernelTool):
    TOOL = "compile"


class VerifyTool(KernelTool):
    TOOL = "verify"


class ProfileTool(KernelTool):
    TOOL = "profile"


class SubmitTool(KernelTool):
    TOOL = "submit"


def _excluded_state(reason: str, kind: str) -> dict[str, Any]:
    return {"done": True, "end": reason, "status": "infra_error", "excluded": True,
            "reward": {"value": None, "kind": kind, "reason": reason, "milestone": None, "excluded": True}}


def _pay(output: AgentLoopOutput, state: dict[str, Any]) -> AgentLoopOutput:
    """The reward on verl's output. An excluded episode gets 0.0 and a mask of zeros; the flag is
    set on every output, since verl concatenates the workers' extra fields key by key."""
    output.extra_fields[KEY] = state
    value = state["reward"]["value"]
    output.reward_score = 0.0 if value is None else float(value)
    output.extra_fields["kernelwright_excluded"] = bool(state["excluded"])
    if state["excluded"]:
        output.response_mask = [0] * len(output.response_mask)  # no token of an excluded episode is trained on
    return output


@register(AGENT_NAME)
class KernelAgentLoop(ToolAgentLoop):
    """verl's tool loop over kernelwright's tools (from `multi_turn.tool_config_path`, the file
    `kernelwright rl export-verl` writes): one KernelEnv episode per trajectory, ended by a submit;
    the reward is set here from the final verdict."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ours = [t for t in self.tools.values() if isinstance(t, KernelTool)]
        if len(ours) != len(TOOL_SPECS):
            raise ValueError("the kernelwright agent loop needs kernelwright's tools: set actor_rollout_ref.rollout.multi_turn.tool_config_path "
                             "to the kernelwright_tools.yaml that `kernelwright rl export-verl` writes")
        self.env_config = ours[0].env_config
        self._data: Any = None
        self._failed = ""

    async def _handle_pending_state(self, agent_data: Any, sampling_params: dict[str, Any]) -> AgentState:
        self._data = agent_data
        ep = _episode_of(agent_data, None, self.env_config, {})
        state = await super()._handle_pending_state(agent_data, sampling_params)
        try:
            await ep.start()  # a task that does not load fails here, before any token is generated
        except ProblemError as exc:  # the task's fault, not the policy's: no turn, excluded
            self._failed = f"the task failed: {exc}"[:2000]
            eos = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else self.tokenizer.pad_token_id
            agent_data.prompt_ids = list(agent_data.prompt_ids) + [eos]  # a one-token response, masked: verl's loop slices
            agent_data.response_mask = [0]                               # the response off the prompt by the mask's length
            return AgentState.TERMINATED
        return state

    async def _handle_processing_tools_state(self, agent_data: Any) -> AgentState:
        state = await super()._handle_processing_tools_state(agent_data)
        ep = getattr(agent_data, "_kernelwright_episode", None)
        return AgentState.TERMINATED if ep is not None and ep.env.done else state

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        try:
            output = await super().run(sampling_params, **kwargs)
            ep = getattr(self._data, "_kernelwright_episode", None)
            if ep is None:
                raise RuntimeError("the trajectory opened no episode")
            if self._failed:
                return _pay(output, _excluded_state(self._failed, self.env_config.reward.kind))
            await ep.finish("verl's limits ended the trajectory")
            return _pay(output, await _off(ep.state))
        finally:
            ep = getattr(self._data, "_kernelwright_episode", None)
            if ep is not None:
                await _off(ep.close)


@register(SINGLE_TURN)
class KernelSingleTurnLoop(SingleTurnAgentLoop):
    """verl's single-turn loop; the answer's fenced model_new.py is judged finally here and the
    reward set, so an excluded answer is masked out as in the multi-turn loop. The environment's
    settings come from the agent-loop config (`settings`, as `kernelwright rl export-verl` writes it)."""

    def __init__(self, *args: Any, settings: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env_config = replace(config_from_dict(settings), tools=False, reply_submits=True)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        output = await super().run(sampling_params, **kwargs)
        text = self.tokenizer.decode(output.response_ids, skip_special_tokens=True)
        payload = ((kwargs.get("tools_kwargs") or {}).get(KEY) or {}).get("task")
        return _pay(output, await _off(_judge_answer, self.env_config, payload, text))


def _judge_answer(config: EnvConfig, payload: Any, text: str) -> dict[str, Any]:
    """A single answer's episode (its fenced model_new.py), ended and closed: its state."""
    return _judge_once(config, payload, text=text)


def _judge_once(config: EnvConfig, payload: Any, *, text: str | None = None, files: dict[str, str] | None = None) -> dict[str, Any]:
    """One episode judged finally, from an answer's text or from workspace files: its state (as the
    tools would carry it); a task that fails is excluded."""
    if payload is None:
        raise ValueError("no task: the row's extra_info.tools_kwargs.kernelwright.task is missing")
    ep = _Episode(config, payload)
    ep.started = True
    with ep.env as env:
        try:
            env.reset(task_from_payload(payload))
        except ProblemError as exc:
            return _excluded_state(f"the task failed: {exc}"[:2000], config.reward.kind)
        if text is not None:
            _, done, _ = env.step(text)
            if not done:
                env.finish("the answer held no model_new.py")
        else:
            if files:
                env.workspace.load(files)
            env.finish("the trajectory ended without a submit")
        return ep.state()


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, **settings: Any) -> dict[str, Any]:
    """verl's reward function (`reward.custom_reward_function.path: pkg://kernelwright.rl.verl`,
    `name: compute_score`; `reward_kwargs` are the environment's settings, as in the tools' config),
    for verl's own loops: the kernelwright loops set their rewards themselves.

    A trajectory whose tools ended the episode is paid that episode's reward; one whose tools
    started an episode that did not end has its workspace's files judged finally (none: -1);
    without tools, the answer's fenced model_new.py is the candidate. `score` is the reward, 0.0
    when excluded (these loops cannot mask an excluded trajectory out of the loss)."""
    if data_source != DATA_SOURCE:
        raise ValueError(f"compute_score is kernelwright's, for rows with data_source {DATA_SOURCE!r}; got {data_source!r}")
    info = (extra_info or {}).get(KEY) or {}
    if info.get("done") and isinstance(info.get("reward"), dict):
        reward = info["reward"]
        return _scored(reward.get("value"), reward, info.get("status"), "the episode's own")
    config = config_from_dict(settings)
    if info.get("unreadable"):
        reward = {"value": -1.0, "milestone": -1, "reason": f"the workspace could not be read: {info['unreadable']}"}
        return _scored(-1.0, reward, "compile_error", "judged here")
    if KEY in (extra_info or {}):  # the tools started an episode: its files are the candidate, the text never is
        state = _judge_once(config, ground_truth, files=info.get("files") or {})
    else:
        state = _judge_answer(replace(config, tools=False, reply_submits=True), ground_truth, solution_str)
    return _scored(state["reward"]["value"], state["reward"], state.get("status"), "judged here")


def _scored(value: Any, reward: dict[str, Any], status: Any, how: str) -> dict[str, Any]:
    return {"score": 0.0 if value is None else float(value), "milestone": reward.get("milestone"), "status": status,
            "kernelwright_excluded": value is None, "reason": json.dumps(reward.get("reason"))[:500], "judged": how}
