"""Serve one workspace's tools over MCP (stdio or streamable HTTP) with the official Python SDK.

`build_server(session)` registers one MCP tool per session spec (name, description and the exact
JSON schema) on the SDK's low-level `Server`; a call runs `session.call(name, arguments,
source="mcp")` in a worker thread, so judging (seconds to minutes) never blocks the event loop.
The text is the agent's compact report, `isError` is set when the tool failed, and the result's
data and status come back as structured content. The session's progress lines go to the calling
client as progress notifications (when it asked for them) and to stderr.

`serve(root, transport=...)` opens the session and serves it. In stdio mode stdout is the protocol
channel: before anything else runs, the real stdout is duplicated for the protocol and fd 1 is
pointed at stderr (fd 0 at the null device), so no compiler, judge child or stray print can ever
write into the protocol stream. The `mcp` package is an optional extra, imported lazily.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SDK_MISSING = "kernelwright mcp needs the MCP SDK: pip install 'mcp>=2.3,<3' (in a checkout: pip install -e '.[mcp]')"
HTTP_PATH = "/mcp"
TRANSPORTS = ("stdio", "http")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
_READ_ONLY = frozenset({"list_files", "read_file"})  # tools that change nothing (hints for clients)
_SMALL = 1000  # data values up to this many characters of JSON go into the structured content


class MissingSDK(RuntimeError):
    """The optional `mcp` package is not installed."""


class SessionError(ValueError):
    """The folder could not be opened as a workspace (the session's own message)."""


def _sdk() -> tuple[Any, Any]:
    """The SDK's low-level Server class and its types module, or MissingSDK."""
    try:
        import mcp.types as types
        from mcp.server.lowlevel import Server
    except ImportError as exc:
        raise MissingSDK(SDK_MISSING) from exc
    return Server, types


def sdk_available() -> bool:
    try:
        _sdk()
    except MissingSDK:
        return False
    return True


# -- progress -------------------------------------------------------------------------------------


class ProgressRouter:
    """The session's progress callback: echoes each line and sends it to the MCP call it belongs to.

    A line belongs to the call whose worker thread emits it; a line from another thread goes to the
    one call in flight, if there is exactly one. Forwarding never raises into the session.
    """

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self._echo = echo
        self._local = threading.local()
        self._lock = threading.Lock()
        self._active: list[Callable[[str], None]] = []

    def __call__(self, line: str) -> None:
        log.info("progress: %s", line)
        if self._echo is not None:
            self._echo(line)
        reporter = getattr(self._local, "reporter", None)
        if reporter is None:
            with self._lock:
                reporter = self._active[0] if len(self._active) == 1 else None
        if reporter is not None:
            reporter(line)

    @contextlib.contextmanager
    def routed(self, reporter: Callable[[str], None]) -> Iterator[None]:
        """Send this thread's lines (and unattributed ones while it is the only call) to reporter."""
        self._local.reporter = reporter
        with self._lock:
            self._active.append(reporter)
        try:
            yield
        finally:
            self._local.reporter = None
            with self._lock:
                self._active.remove(reporter)


def _reporter(ctx: Any) -> Callable[[str], None]:
    """A thread-safe function sending one progress line to the client of this request."""
    import anyio.from_thread
    import anyio.lowlevel

    token = anyio.lowlevel.current_token()
    count = 0

    def report(line: str) -> None:
        nonlocal count
        count += 1
        try:  # a no-op when the client sent no progress token
            anyio.from_thread.run(ctx.session.report_progress, float(count), None, line, token=token)
        except Exception:  # noqa: BLE001 - a lost client or a closed loop must not fail the judging
            log.debug("could not forward a progress line", exc_info=True)

    return report


# -- the server -----------------------------------------------------------------------------------


def _tool(types: Any, spec: Any) -> Any:
    hints = types.ToolAnnotations(read_only_hint=True) if spec.name in _READ_ONLY else None
    return types.Tool(name=spec.name, description=spec.description, input_schema=dict(spec.parameters), annotations=hints)


def _structured(result: Any) -> dict[str, Any]:
    """The result as one JSON object: ok, status, the report text, and the data's small values.

    The text is in it because Claude Code and Codex show the model only the structured content when
    there is one; data values over _SMALL characters of JSON (the reference's breakdown, Nsight
    Compute tables) are left out: the text already renders them.
    """
    data = json.loads(json.dumps(dict(result.data or {}), default=str))
    small = {k: v for k, v in data.items() if len(json.dumps(v)) <= _SMALL}
    return {"ok": bool(result.ok), "status": data.get("status") or ("ok" if result.ok else "error"), "text": result.text, **small}


def _call_result(types: Any, result: Any) -> Any:
    return types.CallToolResult(content=[types.TextContent(text=result.text)], structured_content=_structured(result),
                                is_error=not result.ok)


def _error_result(types: Any, text: str) -> Any:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _instructions(session: Any) -> str:
    names = ", ".join(s.name for s in session.specs)
    return (f"kernelwright workspace {Path(session.root).name}: write a faster model_new.py (and kernels/) for the "
            f"read-only reference, then compile, verify and profile it with the judge. Tools: {names}. "
            "Read SKILL.md first (read_file).")


def build_server(session: Any, *, progress: ProgressRouter | None = None) -> Any:
    """The SDK's low-level Server offering the session's tools; `progress` is the router the session reports to."""
    Server, types = _sdk()
    import anyio.to_thread

    from kernelwright import __version__

    specs = tuple(session.specs)
    schemas = {s.name: dict(s.parameters) for s in specs}

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[_tool(types, s) for s in specs])

    async def call_tool(ctx: Any, params: Any) -> Any:
        if params.name not in schemas:
            return _error_result(types, f"unknown tool {params.name!r}; the tools are: {', '.join(schemas)}")
        run = _runner(session, params.name, dict(params.arguments or {}), progress, _reporter(ctx))
        try:
            result = await anyio.to_thread.run_sync(run)
        except Exception as exc:  # noqa: BLE001 - the session promises not to raise; a bug still answers the client
            log.exception("tool %s failed", params.name)
            return _error_result(types, f"{params.name} failed inside the server: {type(exc).__name__}: {exc}")
        return _call_result(types, result)

    return Server("kernelwright", version=__version__, title="kernelwright workspace", instructions=_instructions(session),
                  on_list_tools=list_tools, on_call_tool=call_tool, get_tool_input_schema=schemas.get)


def _runner(session: Any, name: str, arguments: dict[str, Any], router: ProgressRouter | None,
            report: Callable[[str], None]) -> Callable[[], Any]:
    """The blocking call, with this thread's progress lines routed to the caller."""

    def run() -> Any:
        with router.routed(report) if router is not None else contextlib.nullcontext():
            return session.call(name, arguments, source="mcp")

    return run


# -- transports -----------------------------------------------------------------------------------


@contextlib.contextmanager
def stdio_channel() -> Iterator[tuple[int, int]]:
    """Take fds 0 and 1 for the protocol: returns private duplicates (read, write), then points fd 0
    at the null device and fd 1 at stderr until exit, so children and prints cannot touch the wire."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)  # non-inheritable: children never get them
    assert wire_in > 2 and wire_out > 2, (wire_in, wire_out)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    try:
        yield wire_in, wire_out
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)


async def _serve_stdio(server: Any, wire: tuple[int, int]) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    reader = io.TextIOWrapper(open(wire[0], "rb", closefd=False), encoding="utf-8", errors="replace")
    writer = io.TextIOWrapper(open(wire[1], "wb", closefd=False), encoding="utf-8")
    async with stdio_server(stdin=anyio.wrap_file(reader), stdout=anyio.wrap_file(writer)) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def _serve_http(server: Any, host: str, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve()


def _check(transport: str, port: int) -> None:
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")


def serve(root: str | Path, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765, device: str = "auto",
          store: str | Path | None = None, echo: Callable[[str], None] | None = None) -> None:
    """Serve the workspace at (or above) root until the client leaves (stdio) or the process is stopped (HTTP).

    echo: where progress and startup lines go for a person (stderr in the CLI); they are logged anyway.
    Raises MissingSDK without the `mcp` package and SessionError when root is not a workspace.
    """
    _check(transport, port)
    _sdk()
    import anyio

    from kernelwright.workspace.session import open_session

    say = echo or (lambda line: log.info("%s", line))
    with stdio_channel() if transport == "stdio" else contextlib.nullcontext() as wire:
        router = ProgressRouter(echo)
        try:
            session = open_session(root, device=device, store=store, progress=router)
        except ValueError as exc:
            raise SessionError(str(exc)) from exc
        server = build_server(session, progress=router)
        say(f"kernelwright mcp: tool calls write files in {session.root} and record each check in the store {session.store}")
        if transport == "stdio":
            say(f"kernelwright mcp: serving {session.root} over stdio")
            anyio.run(_serve_stdio, server, wire)
        else:
            if host not in LOCAL_HOSTS:
                say(f"warning: bound to {host}: anyone who reaches it can write files here and run code")
            say(f"kernelwright mcp: serving {session.root} at http://{_netloc(host, port)}{HTTP_PATH}")
            anyio.run(_serve_http, server, host, port)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
