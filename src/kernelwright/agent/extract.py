"""Taking a candidate and ideas out of a model's reply, without running anything.

`extract_candidate` returns the fenced Python block that defines `class ModelNew` (the last such
block when there are several), or None; `extraction_problem` then says precisely why, for the
feedback. `extract_ideas` reads a numbered or bulleted list (the tree search's idea round).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kernelwright import pysource

PYTHON_TAGS = ("", "python", "py", "python3")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+.-]*)[^\n]*$", re.M)
_DEFINES = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.M)
_ITEM = re.compile(r"^[ \t]*(?:\d{1,3}[.)]|[-*\u2022+])[ \t]+(.+)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a reply."""

    tag: str  # the info string's first word, lower case ("" when none)
    code: str  # the text between the fences
    start_line: int  # line of the reply where the code starts (1-based)
    closed: bool  # False when the reply ended inside the block (cut off)


def code_blocks(text: str) -> list[Block]:
    """Every fenced block, in order; an unclosed last block counts, marked as such."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, tag = m.group(1), m.group(2).lower()
        end = _closing(lines, i + 1, fence)
        body = lines[i + 1:end if end is not None else len(lines)]
        blocks.append(Block(tag, "\n".join(body) + "\n", i + 2, end is not None))
        i = (end if end is not None else len(lines)) + 1
    return blocks


def _closing(lines: list[str], start: int, fence: str) -> int | None:
    """The index of the line closing a block opened with `fence`, or None."""
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
            return j
    return None


def _python_blocks(text: str) -> list[Block]:
    return [b for b in code_blocks(text) if b.tag in PYTHON_TAGS]


def _answer_block(text: str) -> Block | None:
    """The last Python block with a line `class ModelNew` (the model's answer), or None."""
    defining = [b for b in _python_blocks(text) if _DEFINES.search(b.code)]
    return defining[-1] if defining else None


def _parse_problem(code: str) -> str:
    """'' when the code parses and defines class ModelNew at module level; else what is wrong."""
    try:
        tree = pysource.parse(code)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "somewhere"
        shown = (exc.text or "").strip()
        return f"{where}: {exc.msg}" + (f": {shown[:160]}" if shown else "")
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return "it parses, but class ModelNew is not defined at the top level of the module"
    return ""


def extract_candidate(text: str) -> str | None:
    """model_new.py from a reply: the last fenced Python block defining class ModelNew, when it
    parses; None otherwise (see extraction_problem)."""
    block = _answer_block(text or "")
    if block is None or not block.closed or _parse_problem(block.code):
        return None
    return block.code


def extraction_problem(text: str) -> str:
    """Why extract_candidate found no candidate in this reply ('' when it found one)."""
    text = text or ""
    blocks = code_blocks(text)
    if not blocks:
        return "no fenced code block found: answer with one ```python block holding the complete model_new.py (defining class ModelNew)"
    block = _answer_block(text)
    if block is None:
        tags = sorted({b.tag or "untagged" for b in blocks})
        return (f"found {len(blocks)} code block(s) ({', '.join(tags)}), but no ```python block with a line 'class ModelNew': "
                "put the complete model_new.py, kernel sources included as strings, in one ```python block")
    if not block.closed:
        return "the ```python block defining ModelNew is not closed: the reply was cut off; send a shorter, complete file"
    problem = _parse_problem(block.code)
    if problem:
        return f"the ```python block defining ModelNew (starting at line {block.start_line} of your reply) does not parse: {problem}"
    return ""


def extract_ideas(text: str, n: int) -> list[str]:
    """Up to n items of the reply's numbered or bulleted list, outside code blocks; an item's
    indented continuation lines are joined to it."""
    items: list[str] = []
    open_item = False  # whether the last line belonged to an item (continuations join it)
    in_code = False
    for line in (text or "").splitlines():
        if _FENCE.match(line):
            in_code, open_item = not in_code, False
            continue
        m = None if in_code else _ITEM.match(line)
        if m:
            items.append(m.group(1).strip())
            open_item = True
        elif open_item and line.strip() and line[:1] in (" ", "\t"):
            items[-1] = f"{items[-1]} {line.strip()}"
        elif line.strip():
            open_item = False  # prose (or code) ends the item
    ideas = [_clean(i) for i in items]
    return [i for i in ideas if i][:max(0, n)]


def _clean(item: str) -> str:
    """An idea without markdown emphasis around it."""
    return re.sub(r"(\*\*|__)(.+?)\1", r"\2", item).strip()
