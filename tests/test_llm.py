"""Model backends over real local HTTP: the OpenAI-compatible backend against the scripted server,
the Anthropic backend against a small Messages-shaped handler, key handling, replay and the factory.
CPU only; no network beyond 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kernelwright.agent import replay
from kernelwright.agent.objective import Objective
from kernelwright.core.runs import LLMError, Message, Reply, Role, ToolCall, ToolSpec, Usage
from kernelwright.agent.replay import ReplayBackend, load_recording, write_recording
from kernelwright.llm import backend as llm
from kernelwright.llm.backend import Backend, make_backend, parse_retry_after, RetryPolicy
from kernelwright.llm.scripted import ScriptedServer, check_script

SECRET = "sk-test-SECRET-0123456789"
WRITE_FILE = ToolSpec("write_file", "Write a file in the workspace.",
                      {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}})
CONVERSATION = (Message(Role.SYSTEM, "You write CUDA kernels."), Message(Role.USER, "Write a row sum kernel."))


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "KERNELWRIGHT_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def openai(server: ScriptedServer, **kw) -> Backend:
    options = dict(base_url=server.url, backoff_s=0.01, timeout_s=5.0)
    options.update(kw)
    return make_backend("openai:test-model", **options)


def ask(script: list[dict], **kw) -> tuple[Reply, ScriptedServer]:
    """One request with the fixed conversation against a fresh scripted server."""
    tools = kw.pop("tools", ())
    with ScriptedServer(script) as server:
        reply = openai(server, **kw).complete(CONVERSATION, tools, key="r0/t0")
    return reply, server


def ask_error(script: list[dict], **kw) -> tuple[LLMError, ScriptedServer]:
    with ScriptedServer(script) as server:
        with pytest.raises(LLMError) as info:
            openai(server, **kw).complete(CONVERSATION, key="r0/t0")
    return info.value, server


# ---- OpenAI-compatible backend ----------------------------------------------------------------

def test_text_reply():
    reply, server = ask([{"text": "hello", "model": "served-model"}])
    assert (reply.text, reply.tool_calls, reply.finish_reason, reply.model) == ("hello", (), "stop", "served-model")
    assert reply.attempts == 1 and reply.latency_s > 0
    request = server.requests[0]
    assert request["model"] == "test-model" and "tools" not in request and "tool_choice" not in request
    assert request["messages"] == [{"role": "system", "content": "You write CUDA kernels."},
                                   {"role": "user", "content": "Write a row sum kernel."}]


def test_tool_call_reply_has_parsed_arguments():
    reply, _ = ask([{"tool_calls": [{"name": "write_file", "arguments": {"path": "k.cu", "text": "x"}}]}])
    assert reply.text == "" and reply.finish_reason == "tool_calls"
    (call,) = reply.tool_calls
    assert call.name == "write_file" and call.arguments == {"path": "k.cu", "text": "x"}
    assert call.id and call.parse_error == "" and call.raw_arguments == ""


@pytest.mark.parametrize("raw, why", [('{"path": "k.cu", ', "not valid JSON"), ("[1, 2]", "JSON object")])
def test_malformed_arguments_set_parse_error(raw, why):
    reply, _ = ask([{"tool_calls": [{"name": "write_file", "arguments": raw}], "text": "trying"}])
    (call,) = reply.tool_calls
    assert call.arguments == {} and call.raw_arguments == raw and why in call.parse_error
    assert reply.text == "trying"


def test_tools_are_sent_as_openai_tools():
    _, server = ask([{"text": "ok"}], tools=(WRITE_FILE,))
    request = server.requests[0]
    assert request["tools"] == [WRITE_FILE.to_openai()] and request["tool_choice"] == "auto"


def test_messages_round_trip_tool_calls_and_results():
    script = [{"tool_calls": [{"name": "write_file", "arguments": {"path": "k.cu"}}, {"name": "verify", "arguments": "{bad"}]},
              {"text": "done"}]
    with ScriptedServer(script) as server:
        backend = openai(server)
        first = backend.complete(CONVERSATION, (WRITE_FILE,))
        good, bad = first.tool_calls
        history = [*CONVERSATION, first.as_message(),
                   Message(Role.TOOL, "wrote k.cu", tool_call_id=good.id, name="write_file"),
                   Message(Role.TOOL, "arguments did not parse", tool_call_id=bad.id, name="verify")]
        assert backend.complete(history, (WRITE_FILE,)).text == "done"
    sent = server.requests[1]["messages"]
    assert sent[2] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": good.id, "type": "function", "function": {"name": "write_file", "arguments": '{"path": "k.cu"}'}},
        {"id": bad.id, "type": "function", "function": {"name": "verify", "arguments": "{bad"}}]}
    assert sent[3:] == [{"role": "tool", "tool_call_id": good.id, "content": "wrote k.cu"},
                        {"role": "tool", "tool_call_id": bad.id, "content": "arguments did not parse"}]


def test_usage_priced_when_server_reports_no_cost():
    def price(prompt: int, completion: int) -> float:
        return prompt * 1e-6 + completion * 2e-6

    usage = {"prompt_tokens": 1000, "completion_tokens": 500}
    reply, _ = ask([{"text": "ok", "usage": usage}], price=price)
    assert reply.usage == Usage(prompt_tokens=1000, completion_tokens=500, cost_usd=pytest.approx(0.002))
    reported, _ = ask([{"text": "ok", "usage": {**usage, "cost": 0.5}}], price=price)
    assert reported.usage.cost_usd == 0.5
    unpriced, _ = ask([{"text": "ok", "usage": usage}])
    assert unpriced.usage.cost_usd is None and unpriced.usage.total_tokens == 1500


def test_default_usage_counts_characters():
    reply, _ = ask([{"text": "x" * 40}])
    assert reply.usage.completion_tokens == 10 and reply.usage.prompt_tokens > 0


def test_retries_503_then_succeeds_honouring_retry_after():
    reply, server = ask([{"http_status": 503, "headers": {"Retry-After": "0.3"}}, {"text": "ok"}])
    assert reply.text == "ok" and reply.attempts == 2 and reply.latency_s >= 0.3
    assert len(server.requests) == 2


@pytest.mark.parametrize("status, kind", [(400, "http"), (401, "auth"), (403, "auth"), (404, "http")])
def test_client_errors_are_not_retried(status, kind):
    error, server = ask_error([{"http_status": status, "body": "no such thing"}, {"text": "never sent"}])
    assert (error.kind, error.status, error.retryable) == (kind, status, False)
    assert "no such thing" in str(error) and len(server.requests) == 1 and server.remaining() == 1


def test_non_json_body_is_a_protocol_error_quoting_300_chars():
    error, server = ask_error([{"raw_body": "<html>" + "x" * 1000}, {"text": "never sent"}])
    assert error.kind == "protocol" and "<html>" + "x" * 294 in str(error) and "x" * 295 not in str(error)
    assert len(server.requests) == 1


def test_body_without_choices_is_a_protocol_error():
    error, _ = ask_error([{"raw_body": '{"object": "error", "detail": "odd gateway"}'}])
    assert error.kind == "protocol" and "no choices" in str(error) and "odd gateway" in str(error)


def test_timeout_after_retries():
    start = time.monotonic()
    error, server = ask_error([{"text": "late", "delay_s": 3}, {"text": "late", "delay_s": 3}], timeout_s=0.3, max_retries=1)
    assert error.kind == "timeout" and error.retryable and "2 attempts" in str(error)
    assert len(server.requests) == 2 and time.monotonic() - start < 2.5


def test_connection_refused_after_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = make_backend("openai:m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.01)
    with pytest.raises(LLMError) as info:
        backend.complete(CONVERSATION)
    assert info.value.kind == "connection" and "3 attempts" in str(info.value)


def test_tools_unsupported_400_falls_back_to_text(caplog: pytest.LogCaptureFixture):
    refusal = json.dumps({"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and '
                                               "--tool-call-parser to be set", "code": 400}})
    with ScriptedServer([{"http_status": 400, "body": refusal}, {"text": "```cuda\n__global__ void k() {}\n```"},
                         {"text": "second"}]) as server:
        backend = openai(server)
        with caplog.at_level(logging.WARNING):
            reply = backend.complete(CONVERSATION, (WRITE_FILE,))
        assert reply.text.startswith("```cuda") and reply.attempts == 2 and backend.supports_tools is False
        backend.complete(CONVERSATION, (WRITE_FILE,))
    first, second, third = server.requests
    assert "tools" in first and "tools" not in second and "tool_choice" not in second and "tools" not in third
    assert any("without tools" in r.getMessage() for r in caplog.records)


def test_other_400_about_tools_is_not_mistaken_for_unsupported():
    error, server = ask_error([{"http_status": 400, "body": "tool 'x' schema is invalid"}, {"text": "never"}])
    assert error.status == 400 and len(server.requests) == 1


def test_max_completion_tokens_refusal_renames_the_field():
    refusal = "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead."
    with ScriptedServer([{"http_status": 400, "body": refusal}, {"text": "ok"}]) as server:
        reply = openai(server).complete(CONVERSATION, max_tokens=64, temperature=0.2)
    assert reply.text == "ok"
    first, second = server.requests
    assert first["max_tokens"] == 64 and "max_tokens" not in second and second["max_completion_tokens"] == 64
    assert second["temperature"] == 0.2


def test_slot_header_reaches_the_server():
    with ScriptedServer([{"text": "a"}, {"text": "b"}]) as server:
        backend = openai(server)
        backend.complete(CONVERSATION, key="r0/b1/t3")
        backend.complete(CONVERSATION)
    assert [r["_slot"] for r in server.requests] == ["r0/b1/t3", None]


def test_when_routes_on_the_last_user_or_tool_message():
    script = [{"when": r"compile error", "text": "fixing"}, {"text": "first try"}]
    with ScriptedServer(script) as server:
        backend = openai(server)
        assert backend.complete(CONVERSATION).text == "first try"
        feedback = [*CONVERSATION, Message(Role.ASSISTANT, "first try"),
                    Message(Role.TOOL, "verdict: compile error at line 3", tool_call_id="c1")]
        assert backend.complete(feedback).text == "fixing"
    assert server.remaining() == 0


def test_exhausted_script_answers_500_quoting_the_message():
    error, server = ask_error([{"when": "never matches", "text": "x"}], max_retries=0)
    assert error.status == 500 and "script exhausted" in str(error) and "Write a row sum kernel." in str(error)
    assert server.remaining() == 1


# ---- keys -------------------------------------------------------------------------------------

def test_key_reaches_server_and_never_logs_or_raises(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    script = [{"text": "ok"}, {"http_status": 503, "body": f"overloaded for {SECRET}"},
              {"http_status": 401, "body": f"Incorrect API key provided: {SECRET}"}]
    caplog.set_level(logging.DEBUG)
    with ScriptedServer(script) as server:
        backend = openai(server)
        backend.complete(CONVERSATION)
        with pytest.raises(LLMError) as info:
            backend.complete(CONVERSATION)
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert info.value.kind == "auth" and "Incorrect API key" in str(info.value) and SECRET not in str(info.value)
    assert SECRET not in repr(backend) and SECRET not in repr(vars(backend))
    assert caplog.records and not any(SECRET in r.getMessage() for r in caplog.records)


def test_override_key_wins(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider")
    monkeypatch.setenv("KERNELWRIGHT_API_KEY", "sk-override")
    _, server = ask([{"text": "ok"}])
    assert server.headers[0]["authorization"] == "Bearer sk-override"


def test_local_server_needs_no_key():
    _, server = ask([{"text": "ok"}])
    assert "authorization" not in server.headers[0]


@pytest.mark.parametrize("spec, url, env", [("openai:gpt-4o", None, "OPENAI_API_KEY"),
                                             ("openai:m", "http://gpu-box.internal:8000/v1", "OPENAI_API_KEY"),
                                             ("anthropic:claude", None, "ANTHROPIC_API_KEY")])
def test_no_key_and_remote_url_fails_before_connecting(monkeypatch: pytest.MonkeyPatch, spec, url, env):
    def no_network(url: str):
        raise AssertionError(f"tried to connect to {url}")

    monkeypatch.setattr(llm, "_opener", no_network)
    with pytest.raises(LLMError) as info:
        make_backend(spec, base_url=url).complete(CONVERSATION)
    assert info.value.kind == "auth" and env in str(info.value) and "KERNELWRIGHT_API_KEY" in str(info.value)


# ---- retry helpers ----------------------------------------------------------------------------

def test_retry_waits_are_capped_and_honour_retry_after():
    policy = RetryPolicy(backoff_s=1.0, max_wait_s=3.0)
    assert 0.5 <= policy.wait_s(1, None) <= 1.0 and 2.0 <= policy.wait_s(3, None) <= 3.0
    assert policy.wait_s(1, 7.0) == 3.0 and policy.wait_s(1, 0.25) == 0.25
    assert parse_retry_after("2") == 2.0 and parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    with pytest.raises(ValueError, match="max_retries must not be negative, got -1"):
        RetryPolicy(max_retries=-1)


# ---- Anthropic backend ------------------------------------------------------------------------

MESSAGES_ANSWER = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                   "content": [{"type": "text", "text": "Writing it."},
                               {"type": "tool_use", "id": "toolu_9", "name": "write_file", "input": {"path": "k.cu"}}],
                   "stop_reason": "tool_use", "usage": {"input_tokens": 120, "output_tokens": 30}}


class MessagesHandler(BaseHTTPRequestHandler):
    """Records each POST and answers with MESSAGES_ANSWER."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))  # type: ignore[attr-defined]
        data = json.dumps(MESSAGES_ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def messages_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), MessagesHandler)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_anthropic_translates_request_and_parses_reply(monkeypatch: pytest.MonkeyPatch, messages_server):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    call = ToolCall(id="toolu_1", name="write_file", arguments={"path": "k.cu"})
    history = [Message(Role.SYSTEM, "You write CUDA kernels."), Message(Role.SYSTEM, "Be brief."),
               Message(Role.USER, "Write a row sum kernel."), Message(Role.ASSISTANT, "", tool_calls=(call,)),
               Message(Role.TOOL, "wrote k.cu", tool_call_id="toolu_1", name="write_file"),
               Message(Role.TOOL, "verdict: correct", tool_call_id="toolu_2", name="verify"),
               Message(Role.USER, "Now make it faster.")]
    backend = make_backend("anthropic:claude-test", base_url=f"http://127.0.0.1:{messages_server.server_port}/",
                           price=lambda p, c: (p + c) / 1000)
    reply = backend.complete(history, (WRITE_FILE,), key="r0/t1")
    path, headers, body = messages_server.seen[0]
    assert path == "/v1/messages" and headers["x-api-key"] == SECRET and headers["anthropic-version"] == "2023-06-01"
    assert headers["x-kernelwright-slot"] == "r0/t1" and "authorization" not in headers
    assert body["system"] == "You write CUDA kernels.\n\nBe brief." and body["max_tokens"] == 8192
    assert body["tools"] == [WRITE_FILE.to_anthropic()] and body["model"] == "claude-test"
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Write a row sum kernel."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {"path": "k.cu"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "wrote k.cu"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "content": "verdict: correct"},
                                     {"type": "text", "text": "Now make it faster."}]}]
    assert reply.text == "Writing it." and reply.finish_reason == "tool_use" and reply.model == "claude-test"
    assert reply.tool_calls == (ToolCall(id="toolu_9", name="write_file", arguments={"path": "k.cu"}),)
    assert reply.usage == Usage(prompt_tokens=120, completion_tokens=30, cost_usd=0.15)
    assert SECRET not in repr(backend)


def test_anthropic_max_tokens_and_temperature_pass_through(messages_server):
    backend = make_backend("anthropic:claude-test", base_url=f"http://localhost:{messages_server.server_port}")
    backend.complete(CONVERSATION, max_tokens=100, temperature=0.0)
    _, headers, body = messages_server.seen[0]
    assert body["max_tokens"] == 100 and body["temperature"] == 0.0 and "x-api-key" not in headers


# ---- replay -----------------------------------------------------------------------------------

def reply_of(text: str) -> Reply:
    return Reply(text=text, usage=Usage(prompt_tokens=10, completion_tokens=5), model="recorded", finish_reason="stop")


def record(path: Path, turns, verdicts=()) -> Path:
    write_recording(path, provenance={"by": "test", "server": "scripted"}, problem={"name": "rowsum", "hash": "sha256:0", "source": "x"},
                    objective=Objective(), strategy="refine", turns=turns, recorded_verdicts=list(verdicts))
    return path


def test_replay_answers_by_slot_in_recorded_order(tmp_path: Path):
    turns = [("t0", reply_of("zero")), ("t1", reply_of("one-a")), {"key": "t1", "reply": reply_of("one-b").to_dict()}]
    path = record(tmp_path / "rec" / "run.json", turns)
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]  # no temp file left behind
    backend = replay.make_backend(f"replay:{path}")
    assert isinstance(backend, ReplayBackend) and backend.name == f"replay:{path}" and backend.supports_tools
    assert backend.complete([], key="t1").text == "one-a"
    assert backend.complete(CONVERSATION, (WRITE_FILE,), key="t0") == reply_of("zero")
    assert backend.complete([], key="t1").text == "one-b"
    for key in ("t1", "t9"):
        with pytest.raises(LLMError) as info:
            backend.complete([], key=key)
        assert info.value.kind == "exhausted" and repr(key) in str(info.value)
    assert backend.recording["objective"] == Objective().to_dict() and backend.recording["problem"]["name"] == "rowsum"


def test_recorded_verdicts_are_only_reachable_apart_from_replies(tmp_path: Path):
    verdicts = [{"key": "t0", "status": "compile_error", "runtime_ms": None, "speedup_vs_best": None},
                {"key": "t0", "status": "correct", "runtime_ms": 1.5, "speedup_vs_best": 1.2}]
    backend = ReplayBackend(record(tmp_path / "r.json", [("t0", reply_of("a")), ("t0", reply_of("b"))], verdicts))
    assert backend.recorded_verdict("t0")["status"] == "compile_error"
    reply = backend.complete([], key="t0")
    assert backend.recorded_verdict("t0")["status"] == "compile_error"
    backend.complete([], key="t0")
    assert backend.recorded_verdict("t0")["status"] == "correct" and backend.recorded_verdict("t5") is None
    backend.recorded_verdict("t0")["status"] = "tampered"
    assert backend.recorded_verdict("t0", 1)["status"] == "correct"
    assert type(reply) is Reply and "verdict" not in reply.to_dict()
    assert not any("verdict" in f.name or "status" in f.name for f in dataclasses.fields(Reply))


def test_a_reply_smuggling_a_verdict_is_refused(tmp_path: Path):
    smuggled = {**reply_of("a").to_dict(), "verdict": {"status": "correct"}}
    with pytest.raises(ValueError, match=r"turn 0 \(key 't0'\).*\['verdict'\]"):
        record(tmp_path / "w.json", [{"key": "t0", "reply": smuggled}])
    path = record(tmp_path / "ok.json", [("t0", reply_of("a"))])
    data = json.loads(path.read_text())
    data["turns"][0]["reply"]["verdict"] = {"status": "correct"}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="verdict"):
        ReplayBackend(path)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(format="something-else"), "format must be 'kernelwright-recording'"),
    (lambda d: d.update(version=2), "version must be 1, got 2"),
    (lambda d: d.pop("turns"), "missing fields ['turns']"),
    (lambda d: d.update(turns={"t0": {}}), "turns must be a list"),
    (lambda d: d.update(turns=[{"key": 3, "reply": {}}]), "turn 0 must be an object"),
    (lambda d: d.update(recorded_verdicts=[{"status": "correct"}]), "recorded verdict 0"),
])
def test_bad_recordings_name_the_file_and_the_problem(tmp_path: Path, change, message):
    path = record(tmp_path / "r.json", [("t0", reply_of("a"))])
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as info:
        load_recording(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_unreadable_recordings(tmp_path: Path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        ReplayBackend(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="cannot read recording"):
        replay.make_backend(f"replay:{tmp_path / 'missing.json'}")
    with pytest.raises(ValueError, match="a field is not JSON"):
        write_recording(tmp_path / "w.json", provenance={"when": object()}, problem={}, objective={}, strategy="refine",
                        turns=[], recorded_verdicts=[])
    assert not list(tmp_path.glob("*w.json*"))


# ---- factory and scripted server --------------------------------------------------------------

@pytest.mark.parametrize("spec", ["gpt-4o", "foo:bar", "openai:", ":model", "", "replay:  "])
def test_bad_specs_name_the_spec_and_providers(spec):
    with pytest.raises(ValueError) as info:
        replay.make_backend(spec)
    assert repr(spec) in str(info.value) and "openai, anthropic, replay" in str(info.value)


def test_the_llm_factory_knows_only_its_clients_and_the_offline_providers_it_is_given(tmp_path: Path):
    """llm/ sits below the agent: a replay is the agent's provider, passed in, never imported."""
    with pytest.raises(ValueError, match="unknown provider 'replay'.*one of openai, anthropic \\("):
        make_backend(f"replay:{tmp_path / 'x.json'}")
    made = make_backend("fake:some/path", offline={"fake": lambda target: ("fake", target)}, base_url="http://localhost:1")
    assert made == ("fake", "some/path")


def test_the_clients_import_nothing_above_core():
    """llm/ is a low layer; its factory imports clients by name (which the static layer check cannot
    see), so a fresh process makes one of each and lists what of kernelwright it loaded."""
    script = ("import sys\nfrom kernelwright.llm.backend import make_backend\nimport kernelwright.llm.scripted\n"
              "make_backend('openai:m', base_url='http://localhost:1/v1'); make_backend('anthropic:m', base_url='http://localhost:1')\n"
              "print(sorted(m for m in sys.modules if m.startswith('kernelwright.') and not m.startswith(('kernelwright.llm', 'kernelwright.core'))))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_factory_builds_backends_without_network():
    openai_backend = make_backend("openai:gpt-4o")
    anthropic_backend = make_backend("Anthropic:claude-x", base_url="http://localhost:1/")
    assert openai_backend.name == "openai:gpt-4o" and anthropic_backend.name == "anthropic:claude-x"
    assert isinstance(openai_backend, Backend) and isinstance(anthropic_backend, Backend)
    with pytest.raises(ValueError, match="base_url must start with http"):
        make_backend("openai:m", base_url="localhost:8000")


@pytest.mark.parametrize("entry, message", [
    ({"text": "a", "colour": "red"}, "unknown keys ['colour']"),
    ({"text": "a", "raw_body": "b"}, "cannot have both text and raw_body"),
    ({"delay_s": 1}, "needs one of"),
    ({"when": "(", "text": "a"}, "not a valid regex"),
    ({"text": "a", "body": "b"}, "go only with http_status"),
    ({"http_status": 700}, "between 100 and 599"),
    ({"tool_calls": [{"arguments": {}}]}, "tool call 0 needs a non-empty string name"),
    ({"tool_calls": [{"name": "f", "arguments": 3}]}, "arguments must be an object or a string"),
    ({"text": 5}, "text must be a string"),
])
def test_script_entries_are_validated(entry, message):
    with pytest.raises(ValueError) as info:
        ScriptedServer([{"text": "fine"}, entry])
    assert "script entry 1" in str(info.value) and message in str(info.value)


def test_script_object_form():
    assert check_script({"entries": [{"text": "a"}]}) == [{"text": "a"}]


def test_scripted_cli_prints_url_and_serves(tmp_path: Path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"entries": [{"text": "from the cli"}]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = subprocess.Popen([sys.executable, "-m", "kernelwright.llm.scripted", str(script)],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        url = child.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        reply = make_backend("openai:m", base_url=url).complete(CONVERSATION)
        assert reply.text == "from the cli"
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url + "/models", timeout=5) as r:
            assert json.load(r)["data"][0]["id"] == "scripted"
    finally:
        child.terminate()
        child.wait(timeout=10)
        child.stdout.close()
