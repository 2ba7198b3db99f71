"""The check before a run (llm.backend.preflight): a missing key, a refused key or a server that does not
answer stops `optimize` before anything is measured, with exit code 2 and the fix, and leaves no run.
Only local fakes: the scripted server, a tiny handler, a closed port and a socket that never answers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kernelwright.agent import optimize
from kernelwright.agent.replay import make_backend
from kernelwright.llm.backend import preflight
from kernelwright.agent.objective import Objective
from kernelwright.llm.scripted import ScriptedServer
from kernelwright.store import Store

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "cpu" / "softmax" / "problem.py"
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "KERNELWRIGHT_API_KEY")


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)


class _Models(BaseHTTPRequestHandler):
    """Answers every GET with the server's `status`, and records the paths and headers it saw."""

    def do_GET(self) -> None:  # noqa: N802 (the base class's naming)
        self.server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))  # type: ignore[attr-defined]
        body = b'{"error": {"message": "scripted"}}'
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def models_server():
    """A local server answering GETs with a status the test sets (`server.status`)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    httpd.status, httpd.seen = 200, []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("spec, env", [("openai:gpt-x", "OPENAI_API_KEY"), ("anthropic:claude-x", "ANTHROPIC_API_KEY")])
def test_no_key_for_a_hosted_api_names_the_variable(spec, env):
    with pytest.raises(ValueError) as info:
        preflight(make_backend(spec))
    text = str(info.value)
    assert env in text and "KERNELWRIGHT_API_KEY" in text and "no run was made" in text


def test_an_unreachable_server_is_named_with_the_error():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(ValueError) as info:
        preflight(make_backend("openai:local", base_url=url))
    assert f"{url}/models" in str(info.value) and "cannot reach" in str(info.value) and "--base-url" in str(info.value)


def test_a_server_that_never_answers_fails_within_the_short_timeout():
    with socket.socket() as listener:  # accepts connections (the backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        backend = make_backend("openai:local", base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1", timeout_s=600)
        with pytest.raises(ValueError, match="no answer .* within 0.3 s"):
            preflight(backend, timeout_s=0.3)


@pytest.mark.parametrize("spec, path, header, env", [("openai:m", "/v1/models", "authorization", "OPENAI_API_KEY"),
                                                     ("anthropic:m", "/v1/models", "x-api-key", "ANTHROPIC_API_KEY")])
def test_a_refused_key_says_which_variable_to_check(monkeypatch, models_server, spec, path, header, env):
    monkeypatch.setenv(env, "sk-wrong-0123")
    models_server.status = 401
    base = f"http://127.0.0.1:{models_server.server_address[1]}" + ("/v1" if spec.startswith("openai") else "")
    with pytest.raises(ValueError) as info:
        preflight(make_backend(spec, base_url=base))
    assert "HTTP 401" in str(info.value) and env in str(info.value) and "sk-wrong" not in str(info.value)
    ((seen_path, headers),) = models_server.seen
    assert seen_path == path and "sk-wrong-0123" in headers[header]  # one GET, with the key


def test_any_other_answer_shows_the_server_is_there(models_server):
    models_server.status = 404  # a server without a model list
    preflight(make_backend("openai:m", base_url=f"http://127.0.0.1:{models_server.server_address[1]}/v1"))
    with ScriptedServer([{"text": "never asked"}]) as server:
        preflight(make_backend("openai:m", base_url=server.url))
        assert server.requests == [] and server.remaining() == 1  # the check asks the model nothing


def test_a_replay_needs_no_check():
    preflight(make_backend(f"replay:{ROOT / 'examples' / 'recordings' / 'cpu_softmax.json'}"))


def test_optimize_without_a_key_stops_before_any_run(tmp_path):
    """Before the check, the run was made, the baselines measured, and the run paused on the first request."""
    req = optimize.RunRequest(problem_spec=str(PROBLEM), model="openai:gpt-x", device="cpu", store=tmp_path / "store.sqlite",
                              objective=Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0))
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        optimize.start(req)
    with Store.open(tmp_path / "store.sqlite") as db:
        assert db.list_runs() == []


def test_cli_exits_2_with_the_fix_and_leaves_no_run(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    store = tmp_path / "store.sqlite"
    done = subprocess.run([sys.executable, "-m", "kernelwright", "optimize", str(PROBLEM), "--model", "openai:gpt-x", "--device", "cpu",
                           "--store", str(store)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stderr
    assert "OPENAI_API_KEY" in " ".join(done.stderr.split()) and "measuring" not in done.stderr and done.stdout == ""
    with Store.open(store) as db:
        assert db.list_runs() == []
