"""The agent's turn: ask the model, take a candidate from its reply (a fenced code block, or the
workspace its tool calls wrote), have the judge rule on it, feed the verdict back.

`Context` holds what every trajectory of a run shares (problem, objective, backend, judge, the run's
log, the best candidate so far and the counters that decide when the run is stuck); `Trajectory` is
one conversation.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwright.agent import prompts
from kernelwright.agent.extract import extract_candidate, extraction_problem
from kernelwright.agent.feedback import describe
from kernelwright.agent.objective import Objective
from kernelwright.core.runs import LLMError, Message, Reply, Role, StepKind, ToolResult
from kernelwright.agent.runlog import RunLog
from kernelwright.agent.tools import TOOL_SPECS, Tools, render_skill
from kernelwright.agent.workspace import Workspace

DONE = re.compile(r"(?m)^\s*DONE\s*\.?\s*$")  # a line saying only DONE
JUDGED_TOOLS = ("profile", "submit")  # tools whose verdict is a full, timed one: a judged candidate like a reply's
MIN_GAIN = 0.01  # a new best must be this much faster to reset the stuck counter


@dataclass
class Entry:
    """A judged, timed candidate: what the search ranks."""

    key: str  # the request slot whose reply produced it
    candidate_hash: str  # content hash of its files (the store keeps the files)
    verdict: dict[str, Any]  # the verdict's JSON form
    verdict_id: str | None  # the store's id for it
    source: str = "reply"  # reply, tool or engineer
    idea: str = ""  # tree search: the idea it implements

    @property
    def correct(self) -> bool:
        return self.verdict.get("status") == "correct" and self.verdict.get("runtime_ms") is not None

    @property
    def runtime_ms(self) -> float:
        return float(self.verdict.get("runtime_ms") or float("inf"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Entry":
        return Entry(**{f.name: d.get(f.name) for f in dataclasses.fields(Entry) if f.name in d})


@dataclass
class Counters:
    """What decides that a run is stuck."""

    since_gain: int = 0  # judged candidates (refine) or rounds (tree) since the best last improved
    failures: int = 0  # model turns in a row that failed
    idle: int = 0  # tool turns in a row that judged nothing (reading, writing, compiling)
    turns: int = 0  # model requests so far


@dataclass
class Context:
    """What all trajectories of one run share."""

    problem: Any  # problems.loader.Problem
    objective: Objective
    backend: Any  # llm.backend.Backend
    judge: Any  # agent.judging.Judge
    runlog: RunLog
    device: str  # cuda or cpu
    workroot: Path  # one workspace folder per trajectory below it
    replay: bool = False  # the backend replays a recording
    best: Entry | None = None
    entries: list[Entry] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    gpu_lock: threading.Lock = field(default_factory=threading.Lock)  # one verdict at a time on the device
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards best, entries and counters

    def system_message(self) -> Message:
        return Message(Role.SYSTEM, render_skill(self.objective, self.device))

    def use_tools(self) -> bool:
        return bool(getattr(self.backend, "supports_tools", False))

    def stop_reason(self) -> str | None:
        """Why the run must stop now (a budget is spent), or None."""
        o, rl = self.objective, self.runlog
        if o.budget_tokens is not None and rl.tokens >= o.budget_tokens:
            return f"token budget spent ({rl.tokens} of {o.budget_tokens})"
        if o.budget_minutes is not None and rl.elapsed_s >= o.budget_minutes * 60:
            return f"time budget spent ({rl.elapsed_s / 60:.1f} of {o.budget_minutes:g} minutes)"
        return None

    def target_met(self, verdict: dict[str, Any] | None = None) -> bool:
        v = verdict if verdict is not None else (self.best.verdict if self.best else None)
        t = self.objective.target_speedup
        return bool(t and v and v.get("status") == "correct" and (v.get("speedup_vs_best") or 0) >= t)

    def record(self, entry: Entry) -> bool:
        """Count a judged candidate; True when it is the new best."""
        with self.lock:
            self.entries.append(entry)
            best = self.best
            if entry.correct and (best is None or entry.runtime_ms < best.runtime_ms):
                gained = best is None or entry.runtime_ms < best.runtime_ms * (1 - MIN_GAIN)
                self.best = entry
                self.counters.since_gain = 0 if gained else self.counters.since_gain + 1
                return True
            self.counters.since_gain += 1
            return False

    def judge_files(self, ws: Workspace) -> Any:
        """The judge's full verdict on the workspace: built at once (several branches build in
        parallel on the CPU), then judged one at a time on the device."""
        self.judge.prebuild([ws.root])
        with self.gpu_lock:
            return self.judge.full(ws.root)

    def divergence(self, key: str, verdict: dict[str, Any]) -> None:
        """Replays: note where a fresh verdict differs from the recorded one (never used as the verdict)."""
        recorded = self.backend.recorded_verdict(key) if self.replay else None
        if recorded and recorded.get("status") != verdict.get("status"):
            text = f"{key}: judged {verdict.get('status')} now; the recording says {recorded.get('status')}"
            self.runlog.step(StepKind.NOTE, {"divergence": text, "key": key})
            self.runlog.say(text)


@dataclass
class Outcome:
    """What one turn produced."""

    entries: list[Entry] = field(default_factory=list)  # timed verdicts
    failed: bool = False  # no candidate, or every candidate failed
    done: bool = False  # the model says it is done
    submitted: bool = False  # the model called submit


class Trajectory:
    """One conversation with the model over its own workspace."""

    def __init__(self, ctx: Context, branch: str, messages: list[Message], *, tools: bool, turn: int = 0, sent: int = 0) -> None:
        self.ctx = ctx
        self.branch = branch  # slot prefix, "" for refine's single trajectory
        self.messages = messages  # the whole conversation so far
        self.use_tools = tools and ctx.use_tools()
        self.turn = turn  # requests made in this trajectory
        self.sent = sent  # messages already recorded as sent
        self.workspace = Workspace(ctx.workroot / (branch.replace("/", "_") or "main"))
        self.workspace.root.mkdir(parents=True, exist_ok=True)
        self.tools = Tools(self.workspace, ctx.judge, target_speedup=ctx.objective.target_speedup) if self.use_tools else None
        self.last_status = ""  # the status of the last verdict this trajectory got, for the tree's account of it
        self.allow_done = False  # refine: a reply saying DONE ends the trajectory once a candidate passed

    @property
    def key(self) -> str:
        return f"{self.branch}t{self.turn}"

    def add(self, message: Message) -> None:
        self.messages.append(message)

    def request(self) -> tuple[str, Reply]:
        """Send the conversation; record what was sent and what came back. Raises LLMError."""
        ctx, key = self.ctx, self.key
        new = [m.to_dict() for m in self.messages[self.sent:]]
        ctx.runlog.step(StepKind.PROMPT, {"key": key, "messages": new}, branch=self.branch)
        self.sent = len(self.messages)
        with ctx.lock:
            ctx.counters.turns += 1
        self.turn += 1
        try:
            reply = ctx.backend.complete(self.messages, TOOL_SPECS if self.use_tools else (), key=key)
        except LLMError as exc:
            ctx.runlog.step(StepKind.LLM_ERROR, {"key": key, "kind": exc.kind, "error": str(exc)[:2000]}, branch=self.branch)
            raise
        ctx.runlog.reply(key, self.branch, reply, replayed=ctx.replay)  # a replay counts the recorded tokens, and no cost
        self.add(reply.as_message())
        self.sent = len(self.messages)
        return key, reply

    def handle(self, key: str, reply: Reply) -> Outcome:
        """Judge what the reply holds and append the feedback."""
        if reply.tool_calls and self.use_tools:
            return self._tool_turn(key, reply)
        return self._text_turn(key, reply)

    def _text_turn(self, key: str, reply: Reply) -> Outcome:
        ctx = self.ctx
        code = extract_candidate(reply.text)
        if code is None:
            if self.allow_done and DONE.search(reply.text) and (ctx.target_met() or (ctx.best is not None and ctx.objective.target_speedup is None)):
                return Outcome(done=True)
            self._feedback(key, prompts.no_candidate(extraction_problem(reply.text), tools=self.use_tools))
            return Outcome(failed=True)
        self.workspace.load({"model_new.py": code})
        judged = ctx.judge_files(self.workspace)
        with ctx.lock:
            ctx.counters.idle = 0
        entry = self._entry(key, judged.verdict.to_dict(), judged.candidate_hash, judged.verdict_id, "reply")
        text = describe(judged, target_speedup=ctx.objective.target_speedup)
        ok = entry.verdict.get("status") == "correct"
        self._feedback(key, text + "\n\n" + prompts.next_step(ok, ctx.target_met(entry.verdict), tools=self.use_tools))
        self.last_status = str(entry.verdict.get("status"))
        return Outcome(entries=[entry] if entry.correct else [], failed=not ok)

    def _tool_turn(self, key: str, reply: Reply) -> Outcome:
        """Run the calls. The turn failed when every call failed, or when it judged candidates and
        none was correct (a failing verify counts); a turn that judged nothing is idle."""
        out, any_ok, judged = Outcome(), False, []
        for call in reply.tool_calls:
            result: ToolResult = self.tools.run(call)  # type: ignore[union-attr]
            self.ctx.runlog.step(StepKind.TOOL_CALL, {"key": key, "call": call.to_dict(), "result": result.to_dict()}, branch=self.branch)
            self.add(Message(Role.TOOL, result.text, tool_call_id=call.id, name=call.name))
            any_ok = any_ok or result.ok
            if result.verdict is not None:
                judged.append(result.verdict.get("status"))
                self.last_status = str(result.verdict.get("status"))
            if result.verdict is not None and call.name in JUDGED_TOOLS:
                entry = self._entry(key, result.verdict, result.candidate_hash or "", result.data.get("verdict_id"), "tool")
                out.entries += [entry] if entry.correct else []
            out.submitted = out.submitted or (result.submitted and (result.verdict or {}).get("status") == "correct")  # a failed submit goes back to the model
        out.failed = not any_ok or (bool(judged) and "correct" not in judged)
        with self.ctx.lock:
            self.ctx.counters.idle = 0 if judged else self.ctx.counters.idle + 1
        return out

    def _entry(self, key: str, verdict: dict[str, Any], candidate_hash: str, verdict_id: str | None, source: str) -> Entry:
        ctx = self.ctx
        entry = Entry(key=key, candidate_hash=candidate_hash, verdict=verdict, verdict_id=verdict_id, source=source)
        best = ctx.record(entry)
        ctx.runlog.step(StepKind.CANDIDATE, {"key": key, "candidate_hash": candidate_hash, "verdict_id": verdict_id,
                                             "verdict": verdict, "source": source, "new_best": best}, branch=self.branch)
        s = verdict.get("speedup_vs_best")
        ctx.runlog.say(f"{key}: {verdict.get('status')}" + (f", {verdict.get('runtime_ms'):.4g} ms, {s:.3f}x the faster baseline" if s else "")
                       + (" (new best)" if best else ""))
        ctx.divergence(key, verdict)
        return entry

    def _feedback(self, key: str, text: str) -> None:
        self.add(Message(Role.USER, text))
        self.ctx.runlog.step(StepKind.FEEDBACK, {"key": key, "text": text}, branch=self.branch)

    def state(self) -> dict[str, Any]:
        """What a resume needs to continue this conversation."""
        return {"branch": self.branch, "messages": [m.to_dict() for m in self.messages], "turn": self.turn,
                "sent": self.sent, "workspace": self.workspace.files() if self.workspace.root.exists() else {}}
