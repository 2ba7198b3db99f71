"""`--sanitize`: one forward of the candidate under NVIDIA's compute-sanitizer (memcheck, racecheck,
initcheck), each tool in a process of its own; the findings are recorded in the verdict's
`sanitizer` field and never change its status.

The process (judge.sanitize_target) builds the inputs of get_inputs() under a seed, runs the
candidate once, and reads every output back with a kernel of torch's (a sum in float64): an
output element the candidate never wrote is then an uninitialised read that initcheck reports.
Torch-free: this module runs in the judge's own process.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelwright.judge import sandbox
from kernelwright.judge.forkpool import absolute_pythonpath

TOOLS = ("memcheck", "racecheck", "initcheck")
PRINT_LIMIT = 20  # errors each tool prints in full
FINDING_LINES = 12  # lines of the report kept per tool
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*([0-9,]+)\s+error", re.I)
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*([0-9,]+)\s+hazard", re.I)


def find_tool() -> str | None:
    """compute-sanitizer on PATH, else under the CUDA toolkit the nvcc on PATH belongs to."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in filter(None, (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
        path = Path(root) / "bin" / "compute-sanitizer"
        if path.exists():
            return str(path)
    nvcc = shutil.which("nvcc")
    if nvcc:
        path = Path(nvcc).resolve().parent / "compute-sanitizer"
        if path.exists():
            return str(path)
    return None


def parse_report(text: str) -> tuple[int | None, list[str]]:
    """(errors, finding lines) of one tool's output. errors is None when no summary line was
    printed (the process died before the tool could report, or it was not the sanitizer)."""
    errors = None
    for pattern in (_SUMMARY, _RACE_SUMMARY):
        m = pattern.findall(text)
        if m:
            errors = max(errors or 0, max(int(x.replace(",", "")) for x in m))
    lines = [ln.strip() for ln in text.splitlines() if ln.startswith("========")]
    findings = [ln.lstrip("=").strip() for ln in lines
                if ln and not re.search(r"COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY", ln)]
    return errors, [f for f in findings if f][:FINDING_LINES]


def _run_tool(exe: str, tool: str, problem: Path, candidate: Path, env: dict[str, str], timeout_s: float, sandbox_mode: str,
              size: str) -> dict[str, Any]:
    """One tool on one forward, confined (judge.sandbox.run_tool), with its report in a file of its
    own (--log-file) and the program's output in another, so that the program's prints cannot
    pass for the tool's report and no pipe can be held open to hang the judge."""
    with tempfile.TemporaryDirectory(prefix="kw-sanitize-") as tmp, tempfile.TemporaryDirectory(prefix="kw-report-") as rdir:
        report, output = Path(rdir) / f"report-{secrets.token_hex(8)}.txt", Path(tmp) / "output.txt"
        cmd = [exe, "--tool", tool, "--print-limit", str(PRINT_LIMIT), "--error-exitcode", "0", "--log-file", str(report),
               sys.executable, "-m", "kernelwright.judge.sanitize_target", str(problem), str(candidate), size]
        t0 = time.perf_counter()
        row: dict[str, Any] = {"tool": tool, "errors": None, "findings": [], "seconds": 0.0, "forward_completed": False}
        read = [str(problem), str(candidate if candidate.is_dir() else candidate.parent), env.get("KERNELWRIGHT_CACHE", "")]
        try:
            timed_out, printed = sandbox.run_tool(cmd, mode=sandbox_mode, cwd=Path(tmp), output=output, timeout_s=timeout_s, env=env,
                                         read=[r for r in read if r], write=[rdir, *([env["TORCH_EXTENSIONS_DIR"]] if "TORCH_EXTENSIONS_DIR" in env else [])])
        except OSError as exc:
            row.update(seconds=round(time.perf_counter() - t0, 1), note=f"could not start: {exc}")
            return row
        text = sandbox.read_regular(report)  # a file the tool wrote inside the sandbox: never through a link
        errors, findings = parse_report(text)  # the tool's own report only: the program could print a summary of its own
        row.update(errors=errors, findings=findings, seconds=round(time.perf_counter() - t0, 1), forward_completed="KW_SANITIZE_DONE" in printed)
        if timed_out:
            row["note"] = f"stopped after {timeout_s:g} s"
        elif not row["forward_completed"]:
            tail = [ln for ln in printed.splitlines() if ln.strip() and not ln.startswith("========")][-3:]
            row["note"] = "the forward did not complete: " + " | ".join(tail)[-300:]
        return row


def run(problem: Path, candidate: Path, *, gpu_index: int, env: dict[str, str], timeout_s: float,
        tools: tuple[str, ...] = TOOLS, sandbox_mode: str = "auto", size: str = "full") -> dict[str, Any]:
    """Run each tool on one forward, with the problem at `size` (full or cpu: the size the verdict
    used); the verdict's `sanitizer` value. Advisory: the forward runs candidate code, which could
    print or write anything, including a report of its own."""
    exe = find_tool()
    if exe is None:
        return {"ran": False, "reason": "compute-sanitizer was not found (PATH, CUDA_HOME, /usr/local/cuda, beside nvcc)", "tools": []}
    # one cudaMalloc per tensor, so that memcheck sees an access past a tensor's end even where
    # torch's caching allocator would have put another tensor there
    full_env = {**absolute_pythonpath(sandbox.clean_env(os.environ)), **env, "CUDA_VISIBLE_DEVICES": str(gpu_index), "PYTHONUNBUFFERED": "1",
                "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    results = [_run_tool(exe, tool, problem, candidate, full_env, timeout_s, sandbox_mode, size) for tool in tools]
    counts = [r["errors"] for r in results]
    return {"ran": True, "reason": "", "tools": results, "errors": None if None in counts else sum(counts)}


def describe(result: dict[str, Any]) -> str:
    """One line for the readable summary."""
    if not result.get("ran"):
        return f"sanitizer not run: {result.get('reason', '')}"
    parts = []
    for r in result["tools"]:
        n = "?" if r["errors"] is None else str(r["errors"])
        parts.append(f"{r['tool']} {n} error(s)" + (f" ({r['note']})" if r.get("note") else ""))
    return "sanitizer: " + ", ".join(parts)
