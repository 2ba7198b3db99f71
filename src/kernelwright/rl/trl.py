"""TRL adapter: the environment for `GRPOTrainer(environment_factory=...)`, a reward function for
single-turn GRPO on fenced code, and the dataset rows both read. TRL itself is not imported here:
these are plain objects in the shapes its trainer asks for (TRL 1.16: an environment is an object
with `reset(**row)`, public typed and documented methods that become its tools, and an optional
`get_reward()`; a reward function takes the prompts, the completions and the dataset's columns).

    from kernelwright.rl import EnvConfig, load_tasks
    from kernelwright.rl.trl import dataset_rows, environment_factory, reward_function

    tasks = load_tasks("builtin:1", split="train")
    rows = dataset_rows(tasks, EnvConfig(device="cuda"))                   # "prompt", "task_id", "split"
    GRPOTrainer(model, args=config, train_dataset=Dataset.from_list(rows),
                environment_factory=environment_factory(tasks, EnvConfig(device="cuda")))   # multi-turn, tools
    GRPOTrainer(model, reward_funcs=[reward_function(tasks, EnvConfig(device="cuda"))], ...)  # single-turn

Rewards are the environment's (rl.reward): a final verdict judged afresh on fresh secret seeds. An
excluded episode (`infra_error`, a task that fails) is paid None. TRL 1.16 leaves a rollout out
only when every reward function returns None for it; with other reward functions beside this one,
the excluded rollout still counts with theirs.

On a GPU, judge on a device the trainer does not use (`EnvConfig(device="cuda")` with
`gpu_index` in the objective, or `KERNELWRIGHT_SERVICE` naming a judge service on another GPU):
training's own memory and kernels beside a verdict would turn correct candidates into failures
and move the timing milestones. TRL calls these tools and `get_reward` one rollout after another.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from kernelwright.agent import prompts
from kernelwright.agent.skill import render_skill
from kernelwright.rl.env import EnvConfig, EpisodeOver, KernelEnv
from kernelwright.rl.tasks import Task


def dataset_rows(tasks: list[Task], config: EnvConfig | None = None, *, tools: bool = True,
                 conversational: bool = True) -> list[dict[str, Any]]:
    """One row per task: its prompt (the skill as the system message and the problem as the user's,
    or the problem's text alone) and the columns the environment and the reward read back."""
    from kernelwright.judge.evaluate import resolve_device

    config = config or EnvConfig()
    device = resolve_device(config.device)
    system = render_skill(config.objective, device)
    rows = []
    for t in tasks:
        user = prompts.problem_prompt(t.problem, device, tools=tools, target=config.objective.target_speedup)
        prompt: Any = [{"role": "system", "content": system}, {"role": "user", "content": user}] if conversational else user
        rows.append({"prompt": prompt, "task_id": t.id, "split": t.split})
    return rows


def _text(completion: Any) -> str:
    """A completion's text: a string, or the last message of a conversational completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    return str(completion)


def reward_function(tasks: list[Task], config: EnvConfig | None = None,
                    on_episode: Callable[[dict[str, Any]], None] | None = None) -> Callable[..., list[float | None]]:
    """A reward function for single-turn GRPO: each completion's fenced model_new.py is the
    episode's one reply (reply_submits), judged finally; a completion without code is paid -1.
    `on_episode` sees each episode's record (tests, logging)."""
    by_id = {t.id: t for t in tasks}
    config = replace(config or EnvConfig(), tools=False, reply_submits=True)

    def kernel_milestone(prompts: list[Any], completions: list[Any], task_id: list[str], **_: Any) -> list[float | None]:
        rewards: list[float | None] = []
        for completion, tid in zip(completions, task_id):
            if tid not in by_id:
                raise KeyError(f"task {tid!r} is not among the reward's tasks")
            with KernelEnv(config) as env:
                env.reset(by_id[tid])
                _, done, info = env.step(_text(completion))
                if not done:  # no fenced code in it
                    info = env.finish("the completion held no model_new.py")
                if on_episode:
                    on_episode(env.record)
            rewards.append(info["reward"]["value"])
        return rewards

    return kernel_milestone


class KernelToolEnv:
    """One episode per `reset`; its public methods are the agent's tools, as TRL calls them."""

    def __init__(self, tasks: dict[str, Task], config: EnvConfig) -> None:
        self._tasks, self._env = tasks, KernelEnv(config)

    def reset(self, **row: Any) -> str | None:
        """Start the row's task (its `task_id` column); the prompt is already in the row."""
        tid = row.get("task_id")
        if tid not in self._tasks:
            raise KeyError(f"row task_id {tid!r} is not among the environment's tasks")
        self._env.reset(self._tasks[tid])
        return None

    def _call(self, name: str, **arguments: Any) -> str:
        try:
            obs, _, info = self._env.step({"name": name, "arguments": arguments})
        except EpisodeOver:
            return "The episode is over: the candidate was submitted or a limit was reached."
        return obs["text"]

    def list_files(self, path: str = "") -> str:
        """List the files in the workspace, or in one folder of it.

        Args:
            path: a folder relative to the workspace; empty for the whole workspace
        """
        return self._call("list_files", **({"path": path} if path else {}))

    def read_file(self, path: str) -> str:
        """Read one text file of the workspace.

        Args:
            path: a path relative to the workspace, e.g. model_new.py
        """
        return self._call("read_file", path=path)

    def write_file(self, path: str, content: str) -> str:
        """Create or replace one file of the workspace with the full content given. model_new.py must define class ModelNew.

        Args:
            path: a path relative to the workspace, e.g. model_new.py or kernels/add.cu
            content: the complete new text of the file
        """
        return self._call("write_file", path=path, content=content)

    def compile(self) -> str:
        """Build the candidate's kernels only and report compiler errors, registers, shared memory and spills."""
        return self._call("compile")

    def verify(self) -> str:
        """Check the candidate's correctness against the reference on the judge's secret inputs, without timing."""
        return self._call("verify")

    def profile(self) -> str:
        """Judge the candidate fully: correctness, then its time against eager PyTorch and torch.compile."""
        return self._call("profile")

    def submit(self, note: str = "") -> str:
        """Hand in the current candidate as the answer and end the episode; it is judged afresh on fresh secret inputs.

        Args:
            note: one or two sentences on the approach
        """
        return self._call("submit", **({"note": note} if note else {}))

    def get_reward(self) -> float | None:
        """The episode's reward (None: excluded, or no episode); an episode not yet over is ended
        first, as a limit would end it."""
        env = self._env
        if getattr(env, "_episode", None) is None:  # no episode started: nothing to pay
            return None
        if not env.done:
            env.finish("ended by the trainer")
        reward = env.get_reward()
        return None if reward is None else reward.value

    @property
    def record(self) -> dict[str, Any]:
        """The last episode's record (rl.env.KernelEnv.record)."""
        return self._env.record


def environment_factory(tasks: list[Task], config: EnvConfig | None = None) -> Callable[[], KernelToolEnv]:
    """What `GRPOTrainer(environment_factory=...)` takes: a callable making one environment per rollout."""
    by_id = {t.id: t for t in tasks}
    config = config or EnvConfig()
    return lambda: KernelToolEnv(by_id, config)
