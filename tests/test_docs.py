"""The docs' commands name things that exist: every `builtin:NAME` in docs/ and the README is a
built-in problem or level, every flag of a `kernelwright` command in their shell blocks is one its
sub-command shows (synopses included, which tests/test_doc_commands.py does not run), and
docs/mcp.md's client example is valid Python that uses the MCP SDK 2.x names (checked against the
SDK when it is installed)."""

from __future__ import annotations

import argparse
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


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def _shown_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings}


def _command_lines():
    """(doc, line number, command) for each `kernelwright ...` command in the docs' fenced blocks."""
    for doc in DOCS:
        fence = None  # the open fence's line, or None outside blocks
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if line.startswith("```"):
                fence = line.strip() if fence is None else None
                continue
            if fence in ("```", "```bash"):
                for command in re.findall(r"(?:^|&&\s*|--\s+|-m\s+)(kernelwright\s.*?)(?=\s+#|\s+&&|$)", line):
                    yield doc.relative_to(ROOT), number, command


def test_the_docs_commands_use_shown_flags_of_their_subcommand():
    """A flag in a doc's command is one its sub-command shows in --help: not a flag of another
    command, and not an earlier name kept hidden (the docs use each flag's one name)."""
    from kernelwright.cli import build_parser

    wrong = []
    for doc, number, command in _command_lines():
        parser, words = build_parser(), command.split()[1:]
        while words and words[0] in _subparsers(parser):
            parser = _subparsers(parser)[words.pop(0)]
        flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b", " ".join(words)))
        wrong += [f"{doc}:{number}: {flag} in `{command}`" for flag in sorted(flags - _shown_flags(parser) - {"-h"})]
    assert not wrong, "\n".join(wrong)
