"""The environment an RL trainer drives: one episode is one task worked on with the agent's tools,
ended by `submit`, the turn limit, the token limit or the wall budget, and paid by the reward of a
final verdict judged afresh on fresh secret seeds.

    env = KernelEnv(EnvConfig(device="cpu"))
    obs = env.reset(task)                        # obs["messages"]: the system (skill) and user (problem) messages
    obs, done, info = env.step({"name": "write_file", "arguments": {"path": "model_new.py", "content": code}})
    obs, done, info = env.step({"name": "submit", "arguments": {}})
    info["reward"]                               # {"value": 1.0, "milestone": 1, "reason": ..., "excluded": False}

The tools, their texts and the skill text are the agent's own (agent.tools, agent.skill, agent.prompts):
`optimize`, the MCP server and this environment are three doors to one implementation. Limits come
from the objective (`max_turns`, `budget_tokens`, `budget_minutes`), as in `optimize`.

An action is one assistant turn: a tool call (`{"name": ..., "arguments": {...}}`, a core ToolCall),
several of them (a list, or `{"tool_calls": [...]}`), a reply's text (a str, or `{"content": ...}`)
holding a fenced model_new.py, or a core Reply. A reply's code is judged as `optimize` judges it
(fully, timed) unless `reply_submits` is set (single-turn training), where it ends the episode.

Generated code never runs in this process: every judgement goes through agent.judging.Judge, which
reaches the judge's sandboxed children through its client.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
import weakref
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kernelwright.agent import prompts
from kernelwright.agent.extract import extract_candidate, extraction_problem
from kernelwright.agent.feedback import describe
from kernelwright.agent.judging import Judge
from kernelwright.agent.objective import Objective
from kernelwright.agent.skill import render_skill
from kernelwright.agent.tools import TOOL_SPECS, Tools
from kernelwright.agent.workspace import Workspace
from kernelwright.core.runs import Message, Reply, Role, ToolCall
from kernelwright.problems.loader import Problem, ProblemError, load_problem
from kernelwright.rl.reward import Reward, RewardConfig, Shaping, score
from kernelwright.rl.tasks import Task


@dataclass(frozen=True)
class EnvConfig:
    """How episodes run and are paid."""

    device: str = "auto"  # cuda, cpu or auto
    objective: Objective = field(default_factory=Objective)  # policy, target and limits (max_turns, budget_tokens, budget_minutes)
    reward: RewardConfig = field(default_factory=RewardConfig)
    tools: bool = True  # offer the tools; False: the model answers with fenced code only
    reply_submits: bool = False  # a reply holding code ends the episode (single-turn training)
    store: Path | None = None  # the verdicts' store (None: the default store)
    record: bool = True  # keep verdicts in the store (False: nothing kept, baselines measured per episode)
    workroot: Path | None = None  # where episode workspaces go (None: a temporary folder)
    keep_workspaces: bool = False
    pool: Any = field(default=None, compare=False)  # a client.pool.Pool every environment judges through (rollout --ray/--pool);
    # its device is the episodes' device, its workers measure baselines beside every candidate (agent.judging.Judge)


class EpisodeOver(RuntimeError):
    """step() after the episode ended: call reset()."""


def _as_call(d: Any, n: int) -> ToolCall:
    if isinstance(d, ToolCall):
        return d
    fn = d.get("function") if isinstance(d, dict) and isinstance(d.get("function"), dict) else d
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError(f"a tool call is {{'name': ..., 'arguments': {{...}}}}, got {str(d)[:200]!r}")
    raw = fn.get("arguments", {})
    args, error = raw, ""
    if isinstance(raw, str):
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            args, error = {}, str(exc)
    if not isinstance(args, dict):
        args, error = {}, f"arguments must be a JSON object, got {type(args).__name__}"
    return ToolCall(id=str(d.get("id") or f"call-{n}"), name=str(fn["name"]), arguments=args,
                    raw_arguments=raw if isinstance(raw, str) else "", parse_error=error)


def parse_action(action: Any) -> tuple[str, tuple[ToolCall, ...], int]:
    """(reply text, tool calls, tokens the reply reports) from any action form the module names."""
    if isinstance(action, Reply):
        return action.text, action.tool_calls, action.usage.total_tokens
    if isinstance(action, str):
        return action, (), 0
    if isinstance(action, (ToolCall, list, tuple)):
        calls = [action] if isinstance(action, ToolCall) else list(action)
        return "", tuple(_as_call(c, i) for i, c in enumerate(calls)), 0
    if isinstance(action, dict):
        if "tool_calls" in action or "content" in action:
            calls = action.get("tool_calls") or []
            return str(action.get("content") or ""), tuple(_as_call(c, i) for i, c in enumerate(calls)), 0
        return "", (_as_call(action, 0),), 0
    raise ValueError(f"an action is a tool call, a list of them, a reply's text or a Reply; got {type(action).__name__}")


class KernelEnv:
    """One episode at a time; create one environment per concurrent episode."""

    def __init__(self, config: EnvConfig | None = None, **changes: Any) -> None:
        self.config = replace(config or EnvConfig(), **changes)
        self._tmp: Path | None = None
        self._episode: dict[str, Any] | None = None
        self.done, self.reward, self._submit_at = True, None, None

    # -- episode -------------------------------------------------------------------------------

    def reset(self, task: Task | Problem | str | Path) -> dict[str, Any]:
        """Start an episode on `task`; the observation holds the prompt messages and the tools."""
        self._episode, self.done, self._submit_at = None, True, None  # a reset that fails leaves no episode to step
        self._drop_workspace()
        task = self._task(task)
        from kernelwright.judge.evaluate import resolve_device

        cfg = self.config
        self.device = cfg.pool.device if cfg.pool is not None else resolve_device(cfg.device)
        self.task = task
        self._heard: list[tuple[float, str]] | None = None  # the final's progress messages, (time.time(), message); None outside it
        self.judge = Judge(task.problem, cfg.objective, device=self.device, store=cfg.store, record=cfg.record, progress=self._hear,
                           pool=cfg.pool)
        root = (cfg.workroot or self._tmproot()) / f"ep-{uuid.uuid4().hex[:12]}"
        root.mkdir(parents=True, exist_ok=False)
        self.workspace = Workspace(root)
        self.tools = Tools(self.workspace, self.judge, target_speedup=cfg.objective.target_speedup)
        self.shaping = Shaping(cfg.reward)
        system = Message(Role.SYSTEM, render_skill(cfg.objective, self.device))
        user = Message(Role.USER, prompts.problem_prompt(task.problem, self.device, tools=cfg.tools, target=cfg.objective.target_speedup))
        self.messages: list[Message] = [system, user]
        self.done, self.reward = False, None
        self.turns, self.tokens, self._t0 = 0, 0, time.monotonic()
        self._episode = {"id": f"ep-{uuid.uuid4().hex[:12]}", "task": task.to_dict(), "device": self.device, "calls": [],
                         "objective": cfg.objective.to_dict(), "reward_config": asdict(cfg.reward)}
        return {"messages": [m.to_dict() for m in self.messages], "text": user.content, "system": system.content,
                "tools": [s.to_openai() for s in TOOL_SPECS] if cfg.tools else [], "task": task.to_dict()}

    def step(self, action: Any, *, tokens: int = 0) -> tuple[dict[str, Any], bool, dict[str, Any]]:
        """One assistant turn. `tokens`: what the turn cost (prompt and completion), when the action
        does not say (a Reply's usage does)."""
        if self._episode is None or self.done:
            raise EpisodeOver("the episode is over (or never started): call reset(task)")
        text, calls, used = parse_action(action)
        self.turns += 1
        self.tokens += max(int(tokens), used)
        start = len(self.messages)
        self.messages.append(Message(Role.ASSISTANT, text, tool_calls=calls))
        if calls and not self.config.tools:  # a transcript answers every call, even one that was not offered
            for call in calls:
                self.messages.append(Message(Role.TOOL, "no tools in this episode: " + prompts.CODE_ANSWER, tool_call_id=call.id, name=call.name))
        submitted = self._tool_turn(calls) if calls and self.config.tools else self._text_turn(text)
        end = "submit" if submitted else self._limit()
        info: dict[str, Any] = {"turn": self.turns, "tokens": self.tokens}
        if end:
            info.update(self._finish(end))  # before the observation: a submit's answer is the final verdict's feedback
        new = self.messages[start + 1:]
        obs = {"messages": [m.to_dict() for m in new], "text": "\n\n".join(m.content for m in new)}
        return obs, self.done, info

    def _tool_turn(self, calls: tuple[ToolCall, ...]) -> bool:
        submitted = False
        for call in calls:
            if submitted:  # calls after a submit are not run
                self.messages.append(Message(Role.TOOL, "not run: the candidate was already submitted", tool_call_id=call.id, name=call.name))
                continue
            if call.name == "submit" and self.workspace.has_candidate() and not call.parse_error:
                # the final judgement (fresh seeds) is the submission's verdict: no full one before it; its text comes in _finish
                self.messages.append(Message(Role.TOOL, "submitted.", tool_call_id=call.id, name=call.name))
                self._episode["calls"].append({"turn": self.turns, "call": call.to_dict(), "ok": True, "submitted": True,
                                               "status": None, "candidate_hash": None, "shaping": 0.0})
                self._submit_at = len(self.messages) - 1
                submitted = True
                continue
            began, at = time.monotonic(), time.time()
            result = self.tools.run(call)
            took = round(time.monotonic() - began, 3)
            bonus = self.shaping.turn(call.name, result.verdict, result.candidate_hash)
            self.messages.append(Message(Role.TOOL, result.text, tool_call_id=call.id, name=call.name))
            self._episode["calls"].append({"turn": self.turns, "call": call.to_dict(), "ok": result.ok, "submitted": result.submitted,
                                           "status": (result.verdict or {}).get("status"), "candidate_hash": result.candidate_hash,
                                           "shaping": bonus, "seconds": took, "started": round(at, 3)})
            submitted = result.submitted
        return submitted

    def _text_turn(self, text: str) -> bool:
        code = extract_candidate(text)
        tools = self.config.tools
        if code is None:
            self.messages.append(Message(Role.USER, prompts.no_candidate(extraction_problem(text), tools=tools)))
            return False
        try:
            self.workspace.load({"model_new.py": code})
        except ValueError as exc:  # the model's mistake (a file too large): feedback, as a tool says it
            self.messages.append(Message(Role.USER, f"Your candidate was not taken: {exc}"))
            return False
        if self.config.reply_submits:
            return True
        began, at = time.monotonic(), time.time()
        try:
            judged = self.judge.full(self.workspace.root)
        except Exception as exc:  # noqa: BLE001 - as a tool's own failure: the turn goes on
            self.messages.append(Message(Role.USER, f"Judging failed inside the environment (not your candidate's fault): {type(exc).__name__}: {exc}"))
            return False
        v = judged.verdict.to_dict()
        self._episode["calls"].append({"turn": self.turns, "call": {"name": "reply"}, "ok": True, "submitted": False,
                                       "status": v.get("status"), "candidate_hash": judged.candidate_hash, "shaping": 0.0,
                                       "seconds": round(time.monotonic() - began, 3), "started": round(at, 3)})
        ok = v.get("status") == "correct"
        target = self.config.objective.target_speedup
        met = bool(ok and target and (v.get("speedup_vs_best") or 0) >= target)
        self.messages.append(Message(Role.USER, describe(judged, target_speedup=target) + "\n\n" + prompts.next_step(ok, met, tools=tools)))
        return False

    def _limit(self) -> str:
        o = self.config.objective
        if self.turns >= o.max_turns:
            return f"turn limit ({o.max_turns})"
        if o.budget_tokens is not None and self.tokens >= o.budget_tokens:
            return f"token limit ({self.tokens} of {o.budget_tokens})"
        if o.budget_minutes is not None and time.monotonic() - self._t0 >= o.budget_minutes * 60:
            return f"wall budget ({o.budget_minutes:g} min)"
        return ""

    def _finish(self, end: str) -> dict[str, Any]:
        """The final verdict on the workspace's candidate (fresh secret seeds, baselines measured
        beside it) and the reward; the episode record is complete after this."""
        self.done = True
        verdict, digest, judged = None, None, None
        began, started = time.monotonic(), time.time()
        heard_from = started
        for attempt in range(2 if self.workspace.has_candidate() else 0):  # an infra_error is judged once more before it excludes
            self._heard, heard_from = [], time.time()  # the last attempt's own messages: where its seconds went (the rollout bench's phases)
            try:
                judged = self.judge.final(self.workspace.candidate_path)
                verdict, digest = judged.verdict.to_dict(), judged.candidate_hash
            except ProblemError as exc:  # the task's fault (it does not load, or does not fit): excluded
                verdict = {"status": "infra_error", "log": f"the task failed, not the candidate: {exc}"[:2000]}
                break
            except ValueError as exc:  # a candidate the judge cannot read (a folder without model_new.py)
                verdict = {"status": "compile_error", "log": str(exc)[:2000]}
            except Exception as exc:  # noqa: BLE001 - the judge's own failure: excluded, never -1
                verdict = {"status": "infra_error", "log": f"{type(exc).__name__}: {exc}"[:2000]}
            if verdict.get("status") != "infra_error":
                break
            verdict["attempts"] = attempt + 1
        at = getattr(self, "_submit_at", None)
        if at is not None and judged is not None:  # the submit call's answer: the final verdict's feedback
            old = self.messages[at]
            text = describe(judged, target_speedup=self.config.objective.target_speedup) + "\n\nsubmitted."
            self.messages[at] = Message(Role.TOOL, text, tool_call_id=old.tool_call_id, name=old.name)
        self.reward = score(verdict, self.config.reward, shaping=self.shaping.total)
        self._episode.update({"end": end, "turns": self.turns, "tokens": self.tokens, "wall_s": round(time.monotonic() - self._t0, 3),
                              "final": {"verdict": verdict, "candidate_hash": digest, "seconds": round(time.monotonic() - began, 3), "started": round(started, 3),
                                        # the judge's messages in the last attempt, [seconds since it began, text]; through a judge
                                        # service only what the client's polls heard (one message per poll)
                                        "progress": [[round(t - heard_from, 3), m[:200]] for t, m in (self._heard or [])[:200]],
                                        "progress_from": round(heard_from - started, 3)},
                              "reward": self.reward.to_dict(),
                              "excluded": self.reward.excluded, "messages": [m.to_dict() for m in self.messages]})
        return {"end": end, "reward": self.reward.to_dict(), "verdict": verdict, "excluded": self.reward.excluded}

    def finish(self, reason: str = "ended by the trainer") -> dict[str, Any]:
        """End the episode now, as a limit would: the workspace's candidate gets the final verdict."""
        if self._episode is None or self.done:
            raise EpisodeOver("the episode is over (or never started): call reset(task)")
        return self._finish(reason)

    def abort(self, reason: str) -> dict[str, Any]:
        """End the episode without a reward, for a failure that is not the policy's (the model's
        server went away): nothing is judged, and the episode is excluded like an infra_error."""
        if self._episode is None or self.done:
            raise EpisodeOver("the episode is over (or never started): call reset(task)")
        self.done = True
        self.reward = Reward(None, self.config.reward.kind, f"aborted: {reason}", excluded=True)
        self._episode.update({"end": f"aborted: {reason}", "turns": self.turns, "tokens": self.tokens,
                              "wall_s": round(time.monotonic() - self._t0, 3), "final": {"verdict": None, "candidate_hash": None},
                              "reward": self.reward.to_dict(), "excluded": True, "messages": [m.to_dict() for m in self.messages]})
        return {"end": self._episode["end"], "reward": self.reward.to_dict(), "verdict": None, "excluded": True}

    # -- records and housekeeping --------------------------------------------------------------

    @property
    def record(self) -> dict[str, Any]:
        """The episode so far (complete once done): task, messages, calls, final verdict, reward and why."""
        if self._episode is None:
            raise EpisodeOver("no episode yet: call reset(task)")
        return dict(self._episode)

    def get_reward(self) -> Reward | None:
        """The episode's reward once it is over (None before)."""
        return self.reward if self._episode is not None else None

    def close(self) -> None:
        self.done = True  # a step after close has no workspace to write to
        self._drop_workspace()
        if self._tmp is not None and not self.config.keep_workspaces:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "KernelEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _hear(self, msg: object) -> None:
        """The judge's progress callback: kept during the final only (the verifies' are not used)."""
        if self._heard is not None:
            self._heard.append((time.time(), str(msg)))

    def _tmproot(self) -> Path:
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="kw-rl-"))
            if not self.config.keep_workspaces:  # also for an environment nobody closes (a trainer's pool)
                weakref.finalize(self, shutil.rmtree, str(self._tmp), True)
        return self._tmp

    def _drop_workspace(self) -> None:
        ws = getattr(self, "workspace", None)
        if ws is not None and not self.config.keep_workspaces:
            shutil.rmtree(ws.root, ignore_errors=True)
        self.workspace = None

    def _task(self, task: Task | Problem | str | Path) -> Task:
        if isinstance(task, Task):
            return task
        problem = task if isinstance(task, Problem) else load_problem(task)
        return Task(problem.name, problem, "unknown", str(getattr(problem, "path", task)), {})  # no split asked for
