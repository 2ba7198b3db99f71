"""A run's conversation as plain text for people (`runs show`): every prompt sent, every reply with
its tokens, every tool call with its result, the judge's feedback and the model's errors, in the
order they happened.

It reads the store's steps (`Store.run_steps`). A prompt step holds only the messages new since the
last request; the feedback and tool results among them were shown where they happened, so they are
named, not printed twice. Long texts are clipped to `limit` characters unless `limit` is None.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from kernelwright.core.runs import StepKind

CLIP = 2000  # characters of one text shown by default (`runs show --full` shows all)


def clip(text: str, limit: int | None) -> str:
    """`text`, cut to `limit` characters with a note of how much was left out."""
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n... [{len(text) - limit} more characters; `runs show --full` shows all]"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()) if text.strip() else "    (empty)"


def _payload(step: dict[str, Any]) -> dict[str, Any]:
    payload = step.get("payload")
    return payload if isinstance(payload, dict) else {}


def _where(step: dict[str, Any]) -> str:
    """`step N` and the branch, for a header."""
    branch = step.get("branch") or ""
    return f"step {step.get('seq')}" + (f", branch {branch}" if branch else "")


def _arguments(call: dict[str, Any], limit: int | None) -> list[str]:
    """One line per argument; a text of several lines (a file's content) as an indented block below its name."""
    if call.get("parse_error"):
        return [_indent(clip(str(call.get("raw_arguments") or ""), limit)), f"    (the arguments did not parse: {call['parse_error']})"]
    lines = []
    for name, value in (call.get("arguments") or {}).items():
        if isinstance(value, str) and "\n" in value:
            lines += [f"    {name}:", "\n".join("  " + line for line in _indent(clip(value, limit)).splitlines())]
        else:
            lines.append(f"    {name}: {clip(value if isinstance(value, str) else json.dumps(value), limit)}")
    return lines or ["    (none)"]


class _Writer:
    """Collects the lines; remembers which texts were shown, so a prompt names them instead."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.lines: list[str] = []
        self.shown: set[str] = set()  # feedback texts already printed

    def prompt(self, step: dict[str, Any], p: dict[str, Any]) -> None:
        messages = [m for m in p.get("messages") or [] if isinstance(m, dict)]
        self.lines.append(f"── {p.get('key') or '-'}: prompt ({_where(step)}; {len(messages)} new message(s)) ──")
        for m in messages:
            role, text = str(m.get("role") or "-"), str(m.get("content") or "")
            if role == "tool":
                self.lines.append(f"  [tool result of {m.get('name') or m.get('tool_call_id') or '-'}: shown with the call above]")
            elif role == "user" and text in self.shown:
                self.lines.append("  [user: the feedback above]")
            else:
                self.lines += [f"  [{role}]", _indent(clip(text, self.limit))]

    def response(self, step: dict[str, Any], p: dict[str, Any]) -> None:
        reply = p.get("reply") if isinstance(p.get("reply"), dict) else {}
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        tokens = f"{int(usage.get('prompt_tokens') or 0)} + {int(usage.get('completion_tokens') or 0)} tokens"
        finish = f", finish {reply['finish_reason']}" if reply.get("finish_reason") else ""
        self.lines.append(f"── {p.get('key') or '-'}: reply ({_where(step)}; {tokens}{finish}) ──")
        if reply.get("text") or not reply.get("tool_calls"):
            self.lines.append(_indent(clip(str(reply.get("text") or ""), self.limit)))
        for call in reply.get("tool_calls") or []:
            self.lines.append(f"  asks for tool {call.get('name') or '-'}")

    def tool_call(self, step: dict[str, Any], p: dict[str, Any]) -> None:
        call = p.get("call") if isinstance(p.get("call"), dict) else {}
        result = p.get("result") if isinstance(p.get("result"), dict) else {}
        ok = "ok" if result.get("ok", True) else "failed"
        self.lines += [f"── {p.get('key') or '-'}: tool call {call.get('name') or '-'} ({_where(step)}) ──", "  arguments:",
                       *_arguments(call, self.limit), f"  result ({ok}):", _indent(clip(str(result.get("text") or ""), self.limit))]

    def feedback(self, step: dict[str, Any], p: dict[str, Any]) -> None:
        text = str(p.get("text") or "")
        self.shown.add(text)
        self.lines += [f"── {p.get('key') or '-'}: feedback to the model ({_where(step)}) ──", _indent(clip(text, self.limit))]

    def candidate(self, step: dict[str, Any], p: dict[str, Any]) -> None:
        v = p.get("verdict") if isinstance(p.get("verdict"), dict) else {}
        timed = f", {v['runtime_ms']:.4g} ms" if isinstance(v.get("runtime_ms"), (int, float)) else ""
        speed = f", {v['speedup_vs_best']:.3f}x the faster baseline" if isinstance(v.get("speedup_vs_best"), (int, float)) else ""
        best = " (new best)" if p.get("new_best") else ""
        self.lines.append(f"  judged {str(p.get('candidate_hash') or '-')[:12]}: {v.get('status') or '-'}{timed}{speed}{best}")

    def llm_error(self, step: dict[str, Any], p: dict[str, Any]) -> None:
        self.lines.append(f"── {p.get('key') or '-'}: the model failed ({_where(step)}; {p.get('kind') or '-'}) ──")
        self.lines.append(_indent(clip(str(p.get("error") or ""), self.limit)))


_RENDER: dict[str, Callable[[_Writer, dict[str, Any], dict[str, Any]], None]] = {
    StepKind.PROMPT.value: _Writer.prompt, StepKind.RESPONSE.value: _Writer.response, StepKind.TOOL_CALL.value: _Writer.tool_call,
    StepKind.FEEDBACK.value: _Writer.feedback, StepKind.CANDIDATE.value: _Writer.candidate, StepKind.LLM_ERROR.value: _Writer.llm_error,
}


def transcript(steps: Sequence[dict[str, Any]], *, limit: int | None = CLIP) -> str:
    """The conversation of a run's steps as text ("" when the run asked the model nothing)."""
    writer = _Writer(limit)
    for step in steps:
        render = _RENDER.get(str(step.get("kind")))
        if render is not None:
            render(writer, step, _payload(step))
    return "\n".join(writer.lines)
