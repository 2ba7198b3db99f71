"""The OpenAI-compatible Chat Completions backend (hosted APIs, gateways, local inference servers).

POSTs `{base_url}/chat/completions`. Tools are sent (with `tool_choice: "auto"`) only when given and
while `supports_tools` is on; a server that answers 400 saying it cannot do tool calling switches it
off and the request is sent once more without tools, so the caller reads code blocks from the text.
A server that refuses `max_tokens` in favour of `max_completion_tokens` gets the request once more
with the field renamed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from typing import Any, Sequence

from kernelwright.llm.backend import (Exchange, HttpSettings, Price, cost_usd, excerpt, post_json,
                                      probe, require_key, slot_header)
from kernelwright.core.runs import LLMError, Message, Reply, Role, ToolCall, ToolSpec, Usage

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_ENV = "OPENAI_API_KEY"
_TOOLS_WORDS = re.compile(r"tool|function", re.IGNORECASE)
_UNSUPPORTED_WORDS = re.compile(r"not supported|unsupported|does not support|doesn't support|not enabled"
                                r"|enable-auto-tool-choice|tool-call-parser", re.IGNORECASE)


class OpenAIChatBackend:
    """Chat Completions over HTTP; see the module docstring."""

    def __init__(self, model: str, *, base_url: str | None = None, timeout_s: float = 600.0, max_retries: int = 4,
                 backoff_s: float = 1.0, max_wait_s: float = 60.0, price: Price | None = None,
                 supports_tools: bool = True) -> None:
        self.settings = HttpSettings.for_model(model, base_url or DEFAULT_BASE_URL, timeout_s=timeout_s, max_retries=max_retries,
                                               backoff_s=backoff_s, max_wait_s=max_wait_s, price=price)
        self.model = model
        self.name = f"openai:{model}"
        self.supports_tools = supports_tools

    def __repr__(self) -> str:
        return f"OpenAIChatBackend(name={self.name!r}, base_url={self.settings.base_url!r}, supports_tools={self.supports_tools})"

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *, key: str = "",
                 max_tokens: int | None = None, temperature: float | None = None) -> Reply:
        """One chat completion for the conversation."""
        secret = require_key(KEY_ENV, self.settings.base_url)
        body = self.request_body(messages, tools, max_tokens=max_tokens, temperature=temperature)
        exchange = self._post(body, key, secret)
        return parse_response(exchange, self.settings.price, self.settings.base_url)

    def preflight(self, timeout_s: float) -> None:
        """GET {base_url}/models once: the server answers and takes the key (LLMError if not)."""
        secret = require_key(KEY_ENV, self.settings.base_url)
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        probe(f"{self.settings.base_url}/models", headers, timeout_s=min(timeout_s, self.settings.timeout_s), key_env=KEY_ENV, secret=secret)

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *,
                     max_tokens: int | None = None, temperature: float | None = None) -> dict[str, Any]:
        """The JSON body for a request."""
        body: dict[str, Any] = {"model": self.model, "messages": [to_openai_message(m, i) for i, m in enumerate(messages)]}
        if tools and self.supports_tools:
            body["tools"] = [t.to_openai() for t in tools]
            body["tool_choice"] = "auto"
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        return body

    def _post(self, body: dict[str, Any], slot: str, secret: str) -> Exchange:
        """Send the body, adjusting it once per known refusal (tools, max_tokens) and sending again."""
        headers = {**slot_header(slot), **({"Authorization": f"Bearer {secret}"} if secret else {})}
        start, refused = time.monotonic(), 0
        while True:
            try:
                exchange = post_json(f"{self.settings.base_url}/chat/completions", body, headers,
                                     timeout_s=self.settings.timeout_s, retry=self.settings.retry, secret=secret)
            except LLMError as exc:
                body = self._adjusted(body, exc)
                refused += 1
                continue
            return dataclasses.replace(exchange, attempts=exchange.attempts + refused, latency_s=time.monotonic() - start)

    def _adjusted(self, body: dict[str, Any], exc: LLMError) -> dict[str, Any]:
        """The body changed to get past a refusal the server explained, or `exc` raised again."""
        text = str(exc)
        if exc.status != 400:
            raise exc
        if "tools" in body and tools_unsupported(text):
            logger.warning("%s: the server does not take tool calls; sending again without tools and "
                           "leaving them off from now on (%s)", self.name, excerpt(text, limit=200))
            self.supports_tools = False
            return {k: v for k, v in body.items() if k not in ("tools", "tool_choice")}
        if "max_tokens" in body and "max_completion_tokens" in text:
            logger.info("%s: the server wants max_completion_tokens; sending again", self.name)
            renamed = {k: v for k, v in body.items() if k != "max_tokens"}
            return {**renamed, "max_completion_tokens": body["max_tokens"]}
        raise exc


def tools_unsupported(error_text: str) -> bool:
    """Whether a 400's text says the server or model cannot do tool calling."""
    return bool(_TOOLS_WORDS.search(error_text) and _UNSUPPORTED_WORDS.search(error_text))


# ---- translation ------------------------------------------------------------------------------

def to_openai_message(message: Message, index: int = 0) -> dict[str, Any]:
    """One Message as a Chat Completions message."""
    if message.role is Role.TOOL:
        if not message.tool_call_id:
            raise ValueError(f"message {index}: a tool message needs tool_call_id, got {message.tool_call_id!r}")
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        out["tool_calls"] = [_call_to_openai(c) for c in message.tool_calls]
    return out


def _call_to_openai(call: ToolCall) -> dict[str, Any]:
    """A tool call as the model made it (malformed arguments are echoed as written)."""
    arguments = call.raw_arguments if call.parse_error else json.dumps(call.arguments)
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def parse_response(exchange: Exchange, price: Price | None, url: str = "") -> Reply:
    """A Chat Completions answer as a Reply; LLMError(kind="protocol") when it has no choice."""
    payload = exchange.payload
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMError("protocol", f"answer from {url} has no choices: {excerpt(json.dumps(payload))!r}")
    message = choices[0].get("message") or {}
    calls = tuple(parse_tool_call(c, i) for i, c in enumerate(message.get("tool_calls") or ()))
    return Reply(text=_text_of(message.get("content")), tool_calls=calls, usage=parse_usage(payload.get("usage"), price),
                 model=str(payload.get("model") or ""), finish_reason=str(choices[0].get("finish_reason") or ""),
                 latency_s=exchange.latency_s, attempts=exchange.attempts)


def _text_of(content: Any) -> str:
    """Message content as text: None is "", a list of parts is their text joined."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content)


def parse_tool_call(raw: Any, index: int) -> ToolCall:
    """One tool call; arguments that are not a JSON object become {} with the reason kept."""
    raw = raw if isinstance(raw, dict) else {}
    function = raw.get("function") or {}
    call_id, name = str(raw.get("id") or f"call_{index}"), str(function.get("name") or "")
    arguments = function.get("arguments")
    if isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, arguments=arguments)
    text = "" if arguments is None else str(arguments)
    parsed, error = parse_arguments(text)
    return ToolCall(id=call_id, name=name, arguments=parsed, raw_arguments=text if error else "", parse_error=error)


def parse_arguments(text: str) -> tuple[dict[str, Any], str]:
    """Arguments text as a dict, and "" or why it is not a JSON object."""
    if not text.strip():
        return {}, ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return {}, f"arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, ""


def parse_usage(usage: Any, price: Price | None) -> Usage:
    """Token counts and cost: the server's `usage.cost` when reported, else the price function's.

    No usage at all means nothing is known: zero tokens and no cost.
    """
    if not isinstance(usage, dict):
        return Usage()
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 cost_usd=cost_usd(usage.get("cost"), prompt, completion, price))
