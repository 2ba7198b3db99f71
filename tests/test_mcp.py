"""`kernelwright mcp` through the official MCP SDK's own clients: a stdio session that writes,
compiles, verifies and profiles a tiny C++ raw candidate (g++, CPU), a streamable HTTP session, the
server's results and progress in process, the stdio fd guard, and the exits without the SDK or
outside a workspace."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelwright.agent.objective import Objective
from kernelwright.core.runs import ToolResult
from kernelwright.agent.tools import TOOL_SPECS

SRC = Path(__file__).resolve().parents[1] / "src"
TOOLS = {"list_files", "read_file", "write_file", "compile", "verify", "profile", "submit"}
FAST = Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0)

from affine_fixture import PROBLEM, candidate  # noqa: E402 - the tiny problem and raw C++ candidate, shared with test_agent_tools.py


@pytest.fixture()
def anyio():
    """anyio (it comes with the MCP SDK, the mcp extra, in .[test]): the tests that talk MCP skip
    without the SDK; the stdio channel and the exit without the SDK are tested either way."""
    pytest.importorskip("mcp", reason="the MCP SDK is the mcp extra (in .[test])")
    return pytest.importorskip("anyio")


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    from kernelwright.workspace.layout import init_workspace

    problem = tmp_path / "affine.py"
    problem.write_text(PROBLEM)
    root = tmp_path / "ws"
    init_workspace(str(problem), root, objective=FAST, device="cpu")
    return root


def server_env(tmp_path: Path) -> dict[str, str]:
    """The server's environment: src importable, the session's build cache, a store of its own."""
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, KERNELWRIGHT_STORE=str(tmp_path / "store.sqlite"),
                KERNELWRIGHT_CACHE=os.environ.get("KERNELWRIGHT_CACHE", str(tmp_path / "cache")))


def command(ws: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["-m", "kernelwright", "mcp", "--workspace", str(ws), "--device", "cpu", "--store", str(tmp_path / "store.sqlite"), *extra]


def text(result) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


# -- a real session over stdio ----------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_stdio_session_writes_compiles_verifies_and_profiles(workspace: Path, tmp_path: Path, anyio):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=command(workspace, tmp_path), env=server_env(tmp_path))
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def session() -> dict:
        out: dict = {}
        with anyio.fail_after(200):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
                out["init"] = await client.initialize()
                out["tools"] = {t.name: t for t in (await client.list_tools()).tools}
                out["write"] = await client.call_tool("write_file", {"path": "model_new.py", "content": candidate()})
                out["compile"] = await client.call_tool("compile", {})
                out["verify"] = await client.call_tool("verify", {})
                out["profile"] = await client.call_tool("profile", {}, progress_callback=on_progress)
                out["outside"] = await client.call_tool("read_file", {"path": "../affine.py"})
                await client.call_tool("write_file", {"path": "model_new.py", "content": candidate("2.0f")})
                out["wrong"] = await client.call_tool("verify", {})
        return out

    t0 = time.perf_counter()
    out = anyio.run(session)
    print(f"stdio session: {time.perf_counter() - t0:.1f} s")

    assert out["init"].server_info.name == "kernelwright"
    assert "SKILL.md" in (out["init"].instructions or "")
    tools = out["tools"]
    assert TOOLS <= set(tools)
    specs = {s.name: s for s in TOOL_SPECS}
    for name in TOOLS:  # the exact schemas and descriptions came through
        assert tools[name].input_schema == specs[name].parameters, name
        assert tools[name].description == specs[name].description
    assert tools["write_file"].input_schema["required"] == ["path", "content"]

    assert not out["write"].is_error and "wrote" in text(out["write"])
    assert not out["compile"].is_error and "build ok" in text(out["compile"]), text(out["compile"])
    assert out["compile"].structured_content["build_ok"] is True
    verify = out["verify"]
    assert not verify.is_error and "status: correct" in text(verify), text(verify)
    assert verify.structured_content["status"] == "correct" and verify.structured_content["verdict_id"]
    profile = out["profile"]
    assert not profile.is_error and "status: correct" in text(profile), text(profile)
    assert "speedup:" in text(profile) and "vs eager" in text(profile), text(profile)
    assert profile.structured_content["status"] == "correct"
    assert profile.structured_content["text"] == text(profile)  # clients that show only structured content
    assert progress, "the session's progress lines reached the client"

    assert out["outside"].is_error and "inside the workspace" in text(out["outside"]), text(out["outside"])
    wrong = out["wrong"]
    assert wrong.is_error or "status: incorrect" in text(wrong), text(wrong)
    assert wrong.structured_content["status"] == "incorrect"

    from kernelwright.store import Store
    from kernelwright.workspace.layout import read_config

    with Store.open(tmp_path / "store.sqlite") as db:  # the workspace's history holds every judged call, marked as MCP's
        rows = db.workspace_checks(read_config(workspace).id)
    assert [(r["kind"], r["source"], r["status"]) for r in rows] == [
        ("compile", "mcp", "build_ok"), ("verify", "mcp", "correct"), ("profile", "mcp", "correct"), ("verify", "mcp", "incorrect")]


# -- streamable HTTP ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}: {log.read_text()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"the server did not listen on {port} within {timeout} s")


@pytest.mark.timeout(240)
def test_streamable_http_lists_tools_and_compiles(workspace: Path, tmp_path: Path, anyio):
    from mcp import Client

    (workspace / "model_new.py").write_text(candidate())
    port = free_port()
    log = tmp_path / "server.log"  # a file, not a pipe: progress lines could fill a pipe nobody reads
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, *command(workspace, tmp_path, "--transport", "http", "--port", str(port))],
                                env=server_env(tmp_path), stdout=sink, stderr=sink, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, log)

        async def session() -> tuple:
            with anyio.fail_after(150):
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:  # the SDK's default negotiation
                    names = {t.name for t in (await client.list_tools()).tools}
                    return names, await client.call_tool("compile", {})

        names, compiled = anyio.run(session)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert TOOLS <= names, log.read_text()
    assert "serving" in log.read_text() and "/mcp" in log.read_text()
    assert not compiled.is_error and "build ok" in text(compiled), text(compiled)


# -- the server in process, with a stand-in session ---------------------------------------------------


class FakeSession:
    """Just what build_server reads: root, specs, call (reporting progress as a session does)."""

    def __init__(self, root: Path) -> None:
        from kernelwright.workspace.mcp_server import ProgressRouter

        self.root, self.specs, self.calls = root, TOOL_SPECS, []
        self.progress = ProgressRouter()

    def call(self, name: str, arguments: dict, *, source: str) -> ToolResult:
        self.calls.append((name, arguments, source))
        self.progress("building")
        self.progress("timing")
        if name == "compile":
            return ToolResult(text="build failed: error: expected ';'", ok=False,
                              data={"build_ok": False, "path": Path("x"), "table": ["row"] * 500})
        return ToolResult(text=f"{name} done", data={"status": "correct", "verdict_id": "v-1"})


@pytest.mark.timeout(60)
def test_server_results_errors_and_progress_in_process(tmp_path: Path, anyio):
    from mcp import Client

    from kernelwright.workspace.mcp_server import build_server

    fake = FakeSession(tmp_path)
    server = build_server(fake, progress=fake.progress)
    lines: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        lines.append(message or "")

    async def session() -> tuple:
        async with Client(server, mode="legacy") as client:
            ok = await client.session.call_tool("verify", {}, progress_callback=on_progress)
            failed = await client.call_tool("compile", {})
            unknown = await client.call_tool("format_disk", {})
            return ok, failed, unknown

    ok, failed, unknown = anyio.run(session)
    assert not ok.is_error and text(ok) == "verify done"
    assert ok.structured_content == {"ok": True, "status": "correct", "text": "verify done", "verdict_id": "v-1"}
    assert lines == ["building", "timing"]
    assert failed.is_error and "build failed" in text(failed)
    assert failed.structured_content == {"ok": False, "status": "error", "text": text(failed), "build_ok": False, "path": "x"}
    assert "table" not in failed.structured_content  # too large: the text renders it
    assert unknown.is_error and "unknown tool" in text(unknown)
    assert [c[2] for c in fake.calls] == ["mcp", "mcp"]  # the unknown tool never reached the session


# -- stdio safety, exits ------------------------------------------------------------------------------

GUARD = """
import os, subprocess, sys
from kernelwright.workspace.mcp_server import stdio_channel
with stdio_channel() as (wire_in, wire_out):
    subprocess.run(["sh", "-c", "echo from-a-child"])
    print("from-a-print", flush=True)
    os.write(1, b"from-fd-1\\n")
    os.write(wire_out, b"wire\\n")
    assert os.read(wire_in, 100) == b"request\\n"
    assert sys.stdin.read() == ""
"""


@pytest.mark.timeout(60)
def test_stdio_channel_keeps_everything_else_off_the_protocol_stream():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, "-c", GUARD], input="request\n", capture_output=True, text=True, env=env, timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "wire\n"
    for line in ("from-a-child", "from-a-print", "from-fd-1"):
        assert line in done.stderr


@pytest.mark.timeout(60)
def test_mcp_outside_a_workspace_exits_2(tmp_path: Path, anyio):  # the SDK is checked first: without it, the exit is the next test's
    done = subprocess.run([sys.executable, "-m", "kernelwright", "mcp", "--workspace", str(tmp_path), "--device", "cpu"],
                          capture_output=True, text=True, env=server_env(tmp_path), timeout=50, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "workspace" in done.stderr and done.stdout == ""


def test_mcp_without_the_sdk_exits_2(monkeypatch, capsys, tmp_path: Path):
    from kernelwright.cli import build_parser

    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp now raises ImportError
    args = build_parser().parse_args(["mcp", "--workspace", str(tmp_path)])
    assert args.func(args) == 2
    assert "pip install -e '.[mcp]'" in capsys.readouterr().err
