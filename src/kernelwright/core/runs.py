"""Typed records the agent's parts pass between them: messages, model replies, tool calls and
results, run and step kinds. Everything that crosses a boundary (backend, tools, loop, store) is one
of these; `to_dict()` / `from_dict()` give the JSON form the store and the recordings keep.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class Role(str, enum.Enum):
    """Who speaks in a chat message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for."""

    id: str  # the model's id for the call, echoed in the tool result
    name: str  # tool name, e.g. "write_file"
    arguments: dict[str, Any]  # parsed JSON arguments ({} when they did not parse)
    raw_arguments: str = ""  # the arguments as the model wrote them (kept when they did not parse)
    parse_error: str = ""  # why the arguments did not parse as a JSON object, or ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "ToolCall":
        return ToolCall(id=str(d["id"]), name=str(d["name"]), arguments=dict(d.get("arguments") or {}),
                        raw_arguments=str(d.get("raw_arguments") or ""), parse_error=str(d.get("parse_error") or ""))


@dataclass(frozen=True)
class Message:
    """One chat message, in a provider-neutral form (backends translate it)."""

    role: Role  # system, user, assistant or tool
    content: str  # the text ("" when an assistant message only calls tools)
    tool_calls: tuple[ToolCall, ...] = ()  # assistant messages: the calls it made
    tool_call_id: str | None = None  # tool messages: the call this answers
    name: str | None = None  # tool messages: the tool's name

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Message":
        return Message(role=Role(d["role"]), content=str(d.get("content") or ""),
                       tool_calls=tuple(ToolCall.from_dict(c) for c in d.get("tool_calls") or ()),
                       tool_call_id=d.get("tool_call_id"), name=d.get("name"))


@dataclass(frozen=True)
class Usage:
    """Tokens one request used, and its cost when known."""

    prompt_tokens: int = 0  # input tokens billed
    completion_tokens: int = 0  # output tokens billed
    cost_usd: float | None = None  # the server's reported cost, else priced from the objective, else None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Usage":
        cost = d.get("cost_usd")
        return Usage(prompt_tokens=int(d.get("prompt_tokens") or 0), completion_tokens=int(d.get("completion_tokens") or 0),
                     cost_usd=None if cost is None else float(cost))


@dataclass(frozen=True)
class Reply:
    """What a backend returns for one request."""

    text: str  # the assistant's text ("" when it only called tools)
    tool_calls: tuple[ToolCall, ...] = ()  # tool calls, in order
    usage: Usage = field(default_factory=Usage)  # tokens and cost
    model: str = ""  # the model name the server reported
    finish_reason: str = ""  # stop, length, tool_calls, ... as the server said
    latency_s: float = 0.0  # seconds from request to reply, retries included
    attempts: int = 1  # requests sent (1 + retries)

    def as_message(self) -> Message:
        """The reply as the assistant message to append to the conversation."""
        return Message(Role.ASSISTANT, self.text, tool_calls=self.tool_calls)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        d["usage"] = self.usage.to_dict()
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Reply":
        return Reply(text=str(d.get("text") or ""), tool_calls=tuple(ToolCall.from_dict(c) for c in d.get("tool_calls") or ()),
                     usage=Usage.from_dict(d.get("usage") or {}), model=str(d.get("model") or ""),
                     finish_reason=str(d.get("finish_reason") or ""), latency_s=float(d.get("latency_s") or 0.0),
                     attempts=int(d.get("attempts") or 1))


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model: name, description and a JSON Schema for its arguments."""

    name: str  # e.g. "verify"
    description: str  # one or two sentences for the model
    parameters: dict[str, Any]  # JSON Schema of an object

    def to_openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def to_anthropic(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


@dataclass(frozen=True)
class ToolResult:
    """What running one tool produced."""

    text: str  # what the model is shown: truncated and sanitised
    ok: bool = True  # False when the tool failed (bad arguments, path outside the workspace, ...)
    verdict: dict[str, Any] | None = None  # the judge's verdict (JSON form) when the tool judged a candidate
    candidate_hash: str | None = None  # the judged candidate's content hash
    submitted: bool = False  # True for submit: the trajectory ends with this candidate
    data: dict[str, Any] = field(default_factory=dict)  # anything else worth keeping (profile tables, file names)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class LLMError(RuntimeError):
    """A backend failed to produce a reply after its retries; `kind` says how."""

    def __init__(self, kind: str, message: str, *, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # "http", "timeout", "connection", "protocol", "auth", "exhausted" (replay ran out)
        self.retryable = retryable  # whether another attempt might succeed
        self.status = status  # HTTP status when there was one


class RunStatus(str, enum.Enum):
    """Where a run stands."""

    RUNNING = "running"
    PAUSED = "paused"  # stuck (no gain, repeated failures) or the model failed after retries: waits for an engineer
    SUCCEEDED = "succeeded"  # reached the target speedup with a re-judged candidate
    FINISHED = "finished"  # budgets spent; the best verified candidate (if any) exported
    FAILED = "failed"  # the run itself broke (not the model, not a candidate)
    INTERRUPTED = "interrupted"  # Ctrl-C


class StepKind(str, enum.Enum):
    """What one row of a run's history records."""

    PROMPT = "prompt"  # the messages sent in one request (the new ones since the last request of the branch)
    RESPONSE = "response"  # the model's reply with tokens and cost
    TOOL_CALL = "tool_call"  # one tool call and its result
    CANDIDATE = "candidate"  # a candidate taken from a reply's code block, and its verdict
    FEEDBACK = "feedback"  # the text fed back to the model
    LLM_ERROR = "llm_error"  # a request that failed after retries
    IDEAS = "ideas"  # tree search: the ideas proposed for a round
    BANK = "bank"  # tree search: the bank after a round
    PAUSE = "pause"  # the run paused, with the summary
    HINT = "hint"  # an engineer's hint
    ENGINEER_CANDIDATE = "engineer_candidate"  # an engineer's own candidate, and its verdict
    FINAL = "final"  # the re-judge of the chosen candidate on fresh seeds
    EXPORT = "export"  # where the drop-in package went
    REVIEW = "review"  # approve / reject with a note
    NOTE = "note"  # anything else worth a line (budget spent, replay divergence)
