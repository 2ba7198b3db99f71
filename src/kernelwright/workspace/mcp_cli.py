"""`kernelwright mcp`: serve a workspace's tools to an MCP client (Claude Code, Codex CLI, ...)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kernelwright.client.commands import service_flag
from kernelwright.flags import device_flag, store_flag

_HOST_HELP = ("HTTP only: the address to bind (default 127.0.0.1). Binding any other address exposes file writing "
              "and code execution in this workspace to the network")


def add_parser(sub: Any) -> None:
    """Register `kernelwright mcp` on the CLI's subparsers."""
    p = sub.add_parser("mcp", help="serve a workspace's tools (files, compile, verify, profile, submit) over MCP",
                       description="Serve a kernelwright workspace's tools to an MCP client over stdio (default) or "
                                   "streamable HTTP at /mcp. The tools write files in the workspace and run its candidate.")
    p.add_argument("--workspace", type=Path, default=Path("."), help="the workspace folder, or a folder inside it (default: the current folder)")
    p.add_argument("--transport", default="stdio", choices=("stdio", "http"), help="stdio (default: the client starts this command) or http")
    p.add_argument("--host", default="127.0.0.1", help=_HOST_HELP)
    p.add_argument("--port", type=int, default=8765, help="HTTP only: the port (default 8765)")
    device_flag(p, help="where candidates are judged (default: auto)")
    service_flag(p)
    store_flag(p)
    p.set_defaults(func=mcp_cmd)


def mcp_cmd(args: argparse.Namespace) -> int:
    """Serve until the client leaves (stdio) or Ctrl-C (HTTP); 2 without the SDK or outside a workspace."""
    from kernelwright.console import err
    from kernelwright.workspace.mcp_server import MissingSDK, SessionError, serve

    if not 0 < args.port < 65536:
        err.print(f"usage error: --port must be in 1..65535, got {args.port}", markup=False, highlight=False, style="red")
        return 2

    def echo(line: str) -> None:
        err.print(line, markup=False, highlight=False)

    try:
        serve(args.workspace, transport=args.transport, host=args.host, port=args.port, device=args.device,
              store=args.store, echo=echo)
    except MissingSDK as exc:
        err.print(str(exc), markup=False, highlight=False, style="red")
        return 2
    except SessionError as exc:
        err.print(str(exc), markup=False, highlight=False, style="red")
        return 2
    return 0
