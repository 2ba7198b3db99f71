"""A scripted local server speaking the OpenAI Chat Completions protocol, for tests and demos.

    with ScriptedServer([{"text": "hello"}, {"http_status": 503}]) as server:
        backend = make_backend("openai:any", base_url=server.url)

Each request takes the first unconsumed script entry whose optional `when` regex matches
(`re.search`) the content of the request's last user or tool message; an entry is used once.
Entry forms:
- `{"text": "..."}`: a normal completion, finish_reason "stop".
- `{"tool_calls": [{"name": ..., "arguments": {...} or "raw text"}], "text": "optional"}`: tool calls
  with generated ids, finish_reason "tool_calls"; string arguments are sent as written.
- `{"http_status": 503, "body": "...", "headers": {...}}`: that error response.
- `{"raw_body": "not json"}`: HTTP 200 with that body.
- on any entry: `delay_s` (sleep first), `usage` (default: characters / 4 of request and reply),
  `model`.
When nothing matches, the answer is HTTP 500 with a JSON error saying the script is exhausted.

Run from a shell: `python -m kernelwright.llm.scripted SCRIPT.json [--port N]` prints the base
URL on its first line and serves until killed. A script file is a list of entries or
`{"entries": [...]}`.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Sequence

from kernelwright.llm.backend import SLOT_HEADER

logger = logging.getLogger(__name__)

_KINDS = ("text", "tool_calls", "http_status", "raw_body")
_TYPES: dict[str, type | tuple[type, ...]] = {
    "when": str, "text": str, "tool_calls": list, "http_status": int, "body": str, "headers": dict,
    "raw_body": str, "delay_s": (int, float), "usage": dict, "model": str}
_CALL_KEYS = frozenset({"name", "arguments", "id"})


# ---- script validation ------------------------------------------------------------------------

def check_script(script: Any) -> list[dict[str, Any]]:
    """A script's entries (a list, or an object with "entries"), checked; ValueError names the entry."""
    entries = script.get("entries") if isinstance(script, dict) else script
    if not isinstance(entries, list):
        raise ValueError(f"a script must be a list of entries or {{\"entries\": [...]}}, got {type(script).__name__}")
    for index, entry in enumerate(entries):
        problem = entry_problem(entry)
        if problem:
            raise ValueError(f"script entry {index}: {problem}")
    return [dict(e) for e in entries]


def load_script(path: str | Path) -> list[dict[str, Any]]:
    """A script file's entries, checked; ValueError names the file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read script {path}: {exc}") from None
    return check_script(data)


def entry_problem(entry: Any) -> str:
    """What is wrong with one script entry, or ""."""
    if not isinstance(entry, dict):
        return f"must be an object, got {type(entry).__name__}"
    unknown = sorted(set(entry) - set(_TYPES))
    if unknown:
        return f"unknown keys {unknown}; known: {sorted(_TYPES)}"
    kinds = [k for k in _KINDS if k in entry]
    if not kinds:
        return f"needs one of {', '.join(_KINDS)}"
    if len(kinds) > 1 and set(kinds) != {"text", "tool_calls"}:
        return f"cannot have both {kinds[0]} and {kinds[1]} (only text and tool_calls go together)"
    if ("body" in entry or "headers" in entry) and "http_status" not in entry:
        return "body and headers go only with http_status"
    return _types_problem(entry) or _values_problem(entry)


def _types_problem(entry: dict[str, Any]) -> str:
    for key, value in entry.items():
        if not isinstance(value, _TYPES[key]) or isinstance(value, bool):
            return f"{key} must be {_type_name(_TYPES[key])}, got {type(value).__name__}"
    return ""


def _type_name(kind: type | tuple[type, ...]) -> str:
    return "a number" if isinstance(kind, tuple) else {"str": "a string", "int": "an integer", "list": "a list",
                                                        "dict": "an object"}[kind.__name__]


def _values_problem(entry: dict[str, Any]) -> str:
    if "when" in entry:
        try:
            re.compile(entry["when"])
        except re.error as exc:
            return f"when is not a valid regex: {exc}"
    if "http_status" in entry and not 100 <= entry["http_status"] <= 599:
        return f"http_status must be between 100 and 599, got {entry['http_status']}"
    if entry.get("delay_s", 0) < 0:
        return f"delay_s must not be negative, got {entry['delay_s']}"
    bad_usage = [k for k, v in entry.get("usage", {}).items() if not isinstance(v, (int, float)) or isinstance(v, bool)]
    if bad_usage:
        return f"usage values must be numbers, not for {bad_usage}"
    return next((p for p in (_call_problem(c, i) for i, c in enumerate(entry.get("tool_calls", []))) if p), "")


def _call_problem(call: Any, index: int) -> str:
    if not isinstance(call, dict):
        return f"tool call {index} must be an object, got {type(call).__name__}"
    unknown = sorted(set(call) - _CALL_KEYS)
    if unknown:
        return f"tool call {index} has unknown keys {unknown}; known: {sorted(_CALL_KEYS)}"
    if not isinstance(call.get("name"), str) or not call["name"]:
        return f"tool call {index} needs a non-empty string name, got {call.get('name')!r}"
    if not isinstance(call.get("arguments", {}), (dict, str)):
        return f"tool call {index}: arguments must be an object or a string, got {type(call['arguments']).__name__}"
    return ""


# ---- answers ----------------------------------------------------------------------------------

def content_text(content: Any) -> str:
    """A message's content as text (a list of parts gives their text joined)."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def last_prompt_text(request: dict[str, Any]) -> str:
    """The content of the request's last user or tool message ("" when there is none)."""
    messages = [m for m in request.get("messages") or () if isinstance(m, dict)]
    last = next((m for m in reversed(messages) if m.get("role") in ("user", "tool")), {})
    return content_text(last.get("content"))


def matches(entry: dict[str, Any], prompt: str) -> bool:
    return "when" not in entry or re.search(entry["when"], prompt) is not None


def completion(entry: dict[str, Any], request: dict[str, Any], serial: int) -> dict[str, Any]:
    """The Chat Completions body for a text or tool-call entry."""
    calls = [_call_json(c, serial, i) for i, c in enumerate(entry.get("tool_calls", []))]
    message: dict[str, Any] = {"role": "assistant", "content": entry.get("text")}
    if calls:
        message["tool_calls"] = calls
    reply_chars = len(entry.get("text") or "") + sum(len(c["function"]["arguments"]) for c in calls)
    return {"id": f"chatcmpl-scripted-{serial}", "object": "chat.completion", "created": int(time.time()),
            "model": entry.get("model") or request.get("model") or "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage(entry, request, reply_chars)}


def _call_json(call: dict[str, Any], serial: int, index: int) -> dict[str, Any]:
    arguments = call.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call.get("id") or f"call_{serial}_{index}", "type": "function",
            "function": {"name": call["name"], "arguments": text}}


def usage(entry: dict[str, Any], request: dict[str, Any], reply_chars: int) -> dict[str, Any]:
    """The entry's usage over a default of characters / 4 of the request's messages and the reply."""
    prompt_chars = sum(len(content_text(m.get("content"))) for m in request.get("messages") or () if isinstance(m, dict))
    counts: dict[str, Any] = {"prompt_tokens": (prompt_chars + 3) // 4, "completion_tokens": (reply_chars + 3) // 4}
    counts.update(entry.get("usage", {}))
    counts["total_tokens"] = counts["prompt_tokens"] + counts["completion_tokens"]
    return counts


def exhausted_error(request: dict[str, Any]) -> dict[str, Any]:
    quoted = last_prompt_text(request)[:200]
    return {"error": {"type": "script_exhausted",
                      "message": f"script exhausted: no entry left matches the last message: {quoted!r}"}}


# ---- the server -------------------------------------------------------------------------------

class ScriptedServer:
    """A Chat Completions server on 127.0.0.1 answering from a script; see the module docstring."""

    def __init__(self, script: Sequence[dict[str, Any]] | dict[str, Any], *, port: int = 0) -> None:
        self._entries = check_script(script if isinstance(script, dict) else list(script))
        self._consumed = [False] * len(self._entries)
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.scripted = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The base URL to give a backend (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Request bodies received so far, in arrival order, each with its slot header under "_slot"."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of each request (names lower-cased), in the order of `requests`."""
        with self._lock:
            return [dict(h) for h in self._headers]

    def remaining(self) -> int:
        """Script entries not consumed yet."""
        with self._lock:
            return self._consumed.count(False)

    def take(self, request: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any] | None]:
        """Record a request and consume the entry that answers it: (request serial, entry or None)."""
        slot = headers.get(SLOT_HEADER.lower())
        prompt = last_prompt_text(request)
        with self._lock:
            self._requests.append({**request, "_slot": None if slot is None else urllib.parse.unquote(slot)})
            self._headers.append(headers)
            for index, entry in enumerate(self._entries):
                if not self._consumed[index] and matches(entry, prompt):
                    self._consumed[index] = True
                    return len(self._requests), entry
            return len(self._requests), None

    def pause(self, seconds: float) -> None:
        """Sleep for an entry's delay, cut short when the server closes."""
        self._stop.wait(seconds)

    def start(self) -> "ScriptedServer":
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                            name=f"scripted-{self.port}", daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (the command line's way)."""
        self._httpd.serve_forever()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    server_version = "kernelwright-scripted/1"

    def do_POST(self) -> None:  # noqa: N802 (the base class's naming)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._send_json(404, {"error": {"message": f"no route for POST {self.path}; use .../chat/completions"}})
        request = self._read_json()
        if request is None:
            return self._send_json(400, {"error": {"message": "request body is not a JSON object"}})
        scripted: ScriptedServer = self.server.scripted  # type: ignore[attr-defined]
        serial, entry = scripted.take(request, {k.lower(): v for k, v in self.headers.items()})
        if entry is None:
            return self._send_json(500, exhausted_error(request))
        if entry.get("delay_s"):
            scripted.pause(float(entry["delay_s"]))
        self._answer(entry, request, serial)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/").endswith("/models"):
            return self._send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        self._send_json(404, {"error": {"message": f"no route for GET {self.path}"}})

    def _answer(self, entry: dict[str, Any], request: dict[str, Any], serial: int) -> None:
        if "http_status" in entry:
            status = entry["http_status"]
            body = entry.get("body", json.dumps({"error": {"message": f"scripted HTTP {status}", "type": "scripted"}}))
            return self._send(status, body.encode(), _content_type(body), entry.get("headers", {}))
        if "raw_body" in entry:
            return self._send(200, entry["raw_body"].encode(), "text/plain")
        self._send_json(200, completion(entry, request, serial))

    def _read_json(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            value = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, str(value))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            logger.debug("client left before the answer to %s was sent", self.path)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's signature)
        logger.debug("scripted server: " + format, *args)


def _content_type(body: str) -> str:
    try:
        json.loads(body)
    except ValueError:
        return "text/plain"
    return "application/json"


# ---- command line -----------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Serve a script file until killed; the base URL is the first line on stdout."""
    parser = argparse.ArgumentParser(prog="python -m kernelwright.llm.scripted",
                                     description="Serve a scripted OpenAI-compatible chat server on 127.0.0.1.")
    parser.add_argument("script", help="JSON file: a list of entries or {\"entries\": [...]}")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: any free port)")
    args = parser.parse_args(argv)
    try:
        entries = load_script(args.script)
    except ValueError as exc:
        parser.error(str(exc))
    server = ScriptedServer(entries, port=args.port)
    sys.stdout.write(server.url + "\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
