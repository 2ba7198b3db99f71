"""The docs' commands name things that exist: every `builtin:NAME` in docs/ and the README is a
built-in problem or level, and docs/mcp.md's client example is valid Python that uses the MCP SDK
2.x names (checked against the SDK when it is installed)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kernelwright.problems.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def test_every_builtin_problem_the_docs_name_exists():
    named = {m for doc in DOCS for m in re.findall(r"builtin:([A-Za-z_0-9]+)", doc.read_text())}
    for name in sorted(named - {"NAME", "LEVEL"}):
        assert load_suite(f"builtin:{name}"), name  # ProblemError (naming close matches) when it does not exist


def _client_example() -> str:
    text = (ROOT / "docs" / "mcp.md").read_text()
    start = text.index("## A client in Python")
    body = text.index("```python\n", start) + len("```python\n")
    return text[body:text.index("```", body)]


def test_the_mcp_client_example_uses_the_sdk_2_names():
    tree = ast.parse(_client_example())
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert {"structured_content", "is_error", "call_tool", "list_tools"} <= attributes
    imported = {(node.module, a.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names}
    assert {("mcp", "Client"), ("mcp", "StdioServerParameters")} <= imported
    mcp = pytest.importorskip("mcp")
    assert hasattr(mcp, "Client") and hasattr(mcp, "StdioServerParameters")
    assert {"content", "structured_content", "is_error"} <= set(mcp.types.CallToolResult.model_fields)
    assert {"read_timeout_seconds", "progress_callback"} <= set(mcp.Client.call_tool.__code__.co_varnames)
