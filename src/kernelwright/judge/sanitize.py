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
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


def run(problem: Path, candidate: Path, *, gpu_index: int, env: dict[str, str], timeout_s: float,
        tools: tuple[str, ...] = TOOLS) -> dict[str, Any]:
    """Run each tool on one forward; the verdict's `sanitizer` value."""
    exe = find_tool()
    if exe is None:
        return {"ran": False, "reason": "compute-sanitizer was not found (PATH, CUDA_HOME, /usr/local/cuda, beside nvcc)", "tools": []}
    results = []
    for tool in tools:
        cmd = [exe, "--tool", tool, "--print-limit", str(PRINT_LIMIT), "--error-exitcode", "0",
               sys.executable, "-m", "kernelwright.judge.sanitize_target", str(problem), str(candidate)]
        # one cudaMalloc per tensor, so that memcheck sees an access past a tensor's end even where
        # torch's caching allocator would have put another tensor there
        full_env = {**os.environ, **env, "CUDA_VISIBLE_DEVICES": str(gpu_index), "PYTHONUNBUFFERED": "1",
                    "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            timed_out = True
        errors, findings = parse_report(out or "")
        done = "KW_SANITIZE_DONE" in (out or "")
        row: dict[str, Any] = {"tool": tool, "errors": errors, "findings": findings, "seconds": round(time.perf_counter() - t0, 1),
                               "forward_completed": done}
        if timed_out:
            row["note"] = f"stopped after {timeout_s:g} s"
        elif not done:
            tail = [ln for ln in (out or "").splitlines() if ln.strip() and not ln.startswith("========")][-3:]
            row["note"] = "the forward did not complete: " + " | ".join(tail)[-300:]
        results.append(row)
    total = sum(r["errors"] or 0 for r in results)
    return {"ran": True, "reason": "", "tools": results, "errors": total}


def describe(result: dict[str, Any]) -> str:
    """One line for the readable summary."""
    if not result.get("ran"):
        return f"sanitizer not run: {result.get('reason', '')}"
    parts = []
    for r in result["tools"]:
        n = "?" if r["errors"] is None else str(r["errors"])
        parts.append(f"{r['tool']} {n} error(s)" + (f" ({r['note']})" if r.get("note") else ""))
    return "sanitizer: " + ", ".join(parts)
