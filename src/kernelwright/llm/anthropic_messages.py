"""The Anthropic Messages backend.

POSTs `{base_url}/v1/messages` (default base URL https://api.anthropic.com) with the `x-api-key` and
`anthropic-version` headers. System messages become the top-level `system` text; assistant tool
calls become `tool_use` blocks; tool results become `tool_result` blocks inside a user message, and
consecutive messages of one role are merged into one message, as the API wants roles to alternate.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Sequence

from kernelwright.llm.backend import (Exchange, HttpSettings, Price, cost_usd, excerpt, post_json,
                                      probe, require_key, slot_header)
from kernelwright.core.runs import LLMError, Message, Reply, Role, ToolCall, ToolSpec, Usage

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
KEY_ENV = "ANTHROPIC_API_KEY"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 8192


class AnthropicMessagesBackend:
    """Anthropic Messages over HTTP; see the module docstring."""

    def __init__(self, model: str, *, base_url: str | None = None, timeout_s: float = 600.0, max_retries: int = 4,
                 backoff_s: float = 1.0, max_wait_s: float = 60.0, price: Price | None = None) -> None:
        self.settings = HttpSettings.for_model(model, base_url or DEFAULT_BASE_URL, timeout_s=timeout_s, max_retries=max_retries,
                                               backoff_s=backoff_s, max_wait_s=max_wait_s, price=price)
        self.model = model
        self.name = f"anthropic:{model}"
        self.supports_tools = True

    def __repr__(self) -> str:
        return f"AnthropicMessagesBackend(name={self.name!r}, base_url={self.settings.base_url!r})"

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *, key: str = "",
                 max_tokens: int | None = None, temperature: float | None = None) -> Reply:
        """One Messages request for the conversation."""
        secret = require_key(KEY_ENV, self.settings.base_url)
        body = self.request_body(messages, tools, max_tokens=max_tokens, temperature=temperature)
        headers = {"anthropic-version": API_VERSION, **slot_header(key), **({"x-api-key": secret} if secret else {})}
        exchange = post_json(f"{self.settings.base_url}/v1/messages", body, headers, timeout_s=self.settings.timeout_s,
                             retry=self.settings.retry, secret=secret)
        return parse_response(exchange, self.settings.price, self.settings.base_url)

    def preflight(self, timeout_s: float) -> None:
        """GET {base_url}/v1/models once: the server answers and takes the key (LLMError if not)."""
        secret = require_key(KEY_ENV, self.settings.base_url)
        headers = {"anthropic-version": API_VERSION, **({"x-api-key": secret} if secret else {})}
        probe(f"{self.settings.base_url}/v1/models", headers, timeout_s=min(timeout_s, self.settings.timeout_s), key_env=KEY_ENV, secret=secret)

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *,
                     max_tokens: int | None = None, temperature: float | None = None) -> dict[str, Any]:
        """The JSON body for a request."""
        system, turns = to_anthropic_messages(messages)
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens or DEFAULT_MAX_TOKENS, "messages": turns}
        if system:
            body["system"] = system
        if tools and self.supports_tools:
            body["tools"] = [t.to_anthropic() for t in tools]
        if temperature is not None:
            body["temperature"] = temperature
        return body


# ---- translation ------------------------------------------------------------------------------

def to_anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the alternating user/assistant turns for a conversation."""
    system = "\n\n".join(m.content for m in messages if m.role is Role.SYSTEM and m.content)
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message.role is Role.SYSTEM:
            continue
        role = "assistant" if message.role is Role.ASSISTANT else "user"
        blocks = content_blocks(message, index)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns


def content_blocks(message: Message, index: int = 0) -> list[dict[str, Any]]:
    """A message's content blocks (empty text is left out: the API refuses empty text blocks)."""
    if message.role is Role.TOOL:
        if not message.tool_call_id:
            raise ValueError(f"message {index}: a tool message needs tool_call_id, got {message.tool_call_id!r}")
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    if message.role is Role.ASSISTANT:
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls]
    return blocks


def parse_response(exchange: Exchange, price: Price | None, url: str = "") -> Reply:
    """A Messages answer as a Reply; LLMError(kind="protocol") when it has no content list."""
    payload = exchange.payload
    content = payload.get("content") if isinstance(payload, dict) else None
    if not isinstance(content, list):
        raise LLMError("protocol", f"answer from {url} has no content blocks: {excerpt(json.dumps(payload))!r}")
    blocks = [b for b in content if isinstance(b, dict)]
    text = "\n".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
    calls = tuple(parse_tool_use(b, i) for i, b in enumerate(b for b in blocks if b.get("type") == "tool_use"))
    return Reply(text=text, tool_calls=calls, usage=parse_usage(payload.get("usage"), price),
                 model=str(payload.get("model") or ""), finish_reason=str(payload.get("stop_reason") or ""),
                 latency_s=exchange.latency_s, attempts=exchange.attempts)


def parse_tool_use(block: dict[str, Any], index: int) -> ToolCall:
    """One tool_use block; its input is already an object (anything else becomes {} with the reason)."""
    call_id, name, given = str(block.get("id") or f"toolu_{index}"), str(block.get("name") or ""), block.get("input")
    if isinstance(given, dict):
        return ToolCall(id=call_id, name=name, arguments=given)
    return ToolCall(id=call_id, name=name, arguments={}, raw_arguments=json.dumps(given),
                    parse_error=f"tool input must be an object, got {type(given).__name__}")


def parse_usage(usage: Any, price: Price | None) -> Usage:
    """Tokens (cache reads and writes count as input) and the cost priced from them."""
    if not isinstance(usage, dict):
        return Usage()
    prompt = sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    completion = int(usage.get("output_tokens") or 0)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost_usd(None, prompt, completion, price))
