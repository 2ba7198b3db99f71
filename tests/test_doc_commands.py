"""Every command block a doc marks as running on a CPU runs as written.

A block is marked by the line `<!-- runs on a CPU -->` right above its ```bash or ```python fence, in
README.md or docs/*.md. A doc's marked blocks run in order, in one fresh folder that holds the
checkout's `examples/` (docs name them by relative paths), with `kernelwright` and `python3` on
PATH, a private store and this session's build cache: bash blocks under `bash -e -o pipefail`,
python blocks by `python3 -c`. Unmarked blocks are synopses (PROBLEM, RUN and the like) and are
not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- runs on a CPU -->"
BLOCK = re.compile(r"^" + re.escape(MARK) + r"\n```(bash|python)\n(.*?)^```", re.S | re.M)


def marked_blocks() -> dict[str, list[tuple[int, str, str]]]:
    """For each doc with marked blocks: (line, language, block) in order."""
    found: dict[str, list[tuple[int, str, str]]] = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        blocks = [(text[:m.start()].count("\n") + 2, m.group(1), m.group(2)) for m in BLOCK.finditer(text)]
        assert text.count(MARK) == len(blocks), f"{doc}: a `{MARK}` line not right above a ```bash or ```python fence"
        if blocks:
            found[str(doc.relative_to(ROOT))] = blocks
    return found


BLOCKS = marked_blocks()


def test_the_docs_mark_blocks_to_run():
    """The harness has something to run: every doc whose commands can run on a CPU marks them."""
    assert {"README.md", "docs/bench.md", "docs/mcp.md", "docs/synth.md", "docs/workspace.md"} <= set(BLOCKS), sorted(BLOCKS)
    assert len(BLOCKS["README.md"]) >= 5, BLOCKS["README.md"]


@pytest.mark.parametrize("doc", sorted(BLOCKS))
def test_marked_blocks_run_as_written(doc, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "kernelwright"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m kernelwright \"$@\"\n")
    shim.chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KERNELWRIGHT_STORE": str(tmp_path / "store.sqlite"), "HOME": os.environ.get("HOME", str(tmp_path))}
    for line, lang, block in BLOCKS[doc]:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block] if lang == "bash" else [sys.executable, "-c", block]
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=280)
        assert done.returncode == 0, (f"{doc}:{line}: exit {done.returncode}\n--- block\n{block}\n--- stdout\n{done.stdout[-3000:]}\n"
                                      f"--- stderr\n{done.stderr[-3000:]}")
