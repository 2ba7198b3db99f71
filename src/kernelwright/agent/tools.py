"""The model's tools over one workspace: files, compile, verify, profile, submit.

`Tools.run(call)` never raises for the model's mistakes (an unknown tool, arguments that did not
parse or are missing, a path outside the workspace): those come back as ToolResult(ok=False) with
an explanation. Every text is sanitised and capped (feedback.sanitize).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from kernelwright.agent import feedback
from kernelwright.agent.judging import Judge, Judged
from kernelwright.agent.profile import breakdown_table, ncu_metrics, ncu_table, reference_breakdown
from kernelwright.core.runs import ToolCall, ToolResult, ToolSpec
from kernelwright.agent.skill import render_skill
from kernelwright.agent.workspace import MAIN, Workspace
from kernelwright import pysource

__all__ = ["SPECS_BY_NAME", "TOOL_SPECS", "Tools", "render_skill"]  # render_skill: re-exported for the loop

log = logging.getLogger(__name__)

_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_PATH = {"type": "string", "description": "a path relative to the workspace, e.g. 'model_new.py' or 'kernels/matmul.cu'"}

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec("list_files", "List the files in the workspace (or in one folder of it), as paths relative to the workspace.",
             _object({"path": {"type": "string", "description": "a folder relative to the workspace; default: the whole workspace"}}, [])),
    ToolSpec("read_file", "Read one text file of the workspace. Long files are shortened, with a note saying so.",
             _object({"path": _PATH}, ["path"])),
    ToolSpec("write_file", "Create or replace one file of the workspace with the full content given (not a diff). "
             "model_new.py must define class ModelNew; CUDA/C++ kernel sources may sit in it as strings or under kernels/, "
             "Triton kernels in it or in a Python file beside it. "
             "Allowed suffixes: .py .cu .cuh .cpp .cc .c .h .hpp .txt .md; at most 512 KB.",
             _object({"path": _PATH, "content": {"type": "string", "description": "the complete new text of the file"}}, ["path", "content"])),
    ToolSpec("compile", "Build the candidate's kernels only (no correctness check, no timing) and report compiler errors, "
             "registers, shared memory and spills. Fast: use it after every edit of a kernel. Triton kernels build at their "
             "first call instead (in verify): compile lists them.", _NO_ARGS),
    ToolSpec("verify", "Check the candidate's correctness against the reference on the judge's secret inputs "
             "(several seeds, distributions, extra shapes), without timing. Says which check failed and by how much.", _NO_ARGS),
    ToolSpec("profile", "Judge the candidate fully: correctness, then its time against eager PyTorch and torch.compile "
             "(speedups, efficiency, target), with the reference's time per kernel or operator and, on a GPU with "
             "Nsight Compute, per-kernel memory and SM throughput, occupancy and registers of your kernels.", _NO_ARGS),
    ToolSpec("submit", "Hand in the current candidate as your answer and end the work. It is judged once more on fresh "
             "secret inputs. Add a short note on what the kernel does.",
             _object({"note": {"type": "string", "description": "one or two sentences on the approach (optional)"}}, [])),
)
SPECS_BY_NAME = {s.name: s for s in TOOL_SPECS}


class Tools:
    """The tools of one trajectory: one workspace, one judge."""

    def __init__(self, workspace: Workspace, judge: Judge, *, target_speedup: float | None, output_limit: int = 6000) -> None:
        self.workspace, self.judge = workspace, judge
        self.target_speedup = target_speedup
        self.output_limit = output_limit
        self._breakdown: dict[str, Any] | None = None  # the reference's, measured once
        self._ncu: dict[str, dict[str, Any]] = {}  # "candidate hash:size" -> ncu figures
        self._handlers: dict[str, Callable[[dict[str, Any]], ToolResult]] = {
            "list_files": self._list_files, "read_file": self._read_file, "write_file": self._write_file,
            "compile": self._compile, "verify": self._verify, "profile": self._profile, "submit": self._submit,
        }

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return TOOL_SPECS

    def run(self, call: ToolCall) -> ToolResult:
        """Run one tool call; every failure is a ToolResult(ok=False) with the reason."""
        problem = self._call_problem(call)
        if problem:
            return self._fail(problem)
        try:
            result = self._handlers[call.name](call.arguments)
        except ValueError as exc:  # the model's mistake: a path, a missing model_new.py, a file too large
            return self._fail(f"{call.name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a tool's own failure must not end the trajectory
            log.exception("tool %s failed", call.name)
            return self._fail(f"{call.name} failed inside the tool (not your candidate's fault): {type(exc).__name__}: {exc}")
        return dataclasses.replace(result, text=self._clean(result.text))

    def _call_problem(self, call: ToolCall) -> str:
        """What is wrong with a call before it runs ('' when nothing)."""
        if call.name not in self._handlers:
            return f"unknown tool {call.name!r}; the tools are: {', '.join(self._handlers)}"
        if not isinstance(call.arguments, dict):
            return f"the arguments of {call.name} must be one JSON object, e.g. {_example(call.name)}"
        if call.parse_error:
            return (f"the arguments of {call.name} did not parse as a JSON object ({call.parse_error}); "
                    f"send them again as one JSON object, e.g. {_example(call.name)}")
        spec = SPECS_BY_NAME[call.name].parameters
        missing = [k for k in spec.get("required", []) if k not in call.arguments]
        if missing:
            return f"{call.name} needs the argument(s) {', '.join(missing)}, e.g. {_example(call.name)}"
        wrong = [k for k, v in call.arguments.items() if k in spec.get("properties", {}) and not isinstance(v, str)]
        if wrong:
            return f"{call.name}: argument(s) {', '.join(wrong)} must be strings"
        return ""

    def _fail(self, text: str) -> ToolResult:
        return ToolResult(text=self._clean(text), ok=False)

    def _clean(self, text: str) -> str:
        return feedback.sanitize(text, self.output_limit, paths={str(self.workspace.root): "<workspace>"})

    # -- files --------------------------------------------------------------------------------

    def _list_files(self, args: dict[str, Any]) -> ToolResult:
        names = self.workspace.list(args.get("path") or ".")
        text = "\n".join(names) if names else f"(no files yet: write {MAIN} first)"
        return ToolResult(text=text, data={"files": names})

    def _read_file(self, args: dict[str, Any]) -> ToolResult:
        return ToolResult(text=self.workspace.read(args["path"], limit=self.output_limit))

    def _write_file(self, args: dict[str, Any]) -> ToolResult:
        path = self.workspace.write(args["path"], args["content"])
        text = f"wrote {len(args['content'].encode('utf-8', errors='replace'))} bytes to {args['path']}"
        if path.suffix == ".py":
            text += _syntax_note(args["content"])
        return ToolResult(text=text, data={"path": args["path"]})

    # -- judging ------------------------------------------------------------------------------

    def _require_candidate(self) -> None:
        if not self.workspace.has_candidate():
            raise ValueError(f"the workspace has no {MAIN} yet; write it with write_file first")

    def _compile(self, args: dict[str, Any]) -> ToolResult:
        self._require_candidate()
        report = self.judge.compile(self.workspace.candidate_path)
        return ToolResult(text=feedback.describe_build(report, limit=self.output_limit), ok=report.ok,
                          data={"build_ok": report.ok, "resources": report.resources, "seconds": report.seconds})

    def _verify(self, args: dict[str, Any]) -> ToolResult:
        self._require_candidate()
        return self._judged(self.judge.verify(self.workspace.candidate_path))

    def _profile(self, args: dict[str, Any]) -> ToolResult:
        self._require_candidate()
        judged = self.judge.full(self.workspace.candidate_path)
        if not getattr(self.judge, "here", True):  # judged by a pool's worker elsewhere; the profilers need the device on this machine
            note = (f"(the reference's breakdown and ncu were not measured: they run on this machine, which has no {self.judge.device} "
                    "device; the verdict above is the pool's)")
            return self._judged(judged, text=feedback.describe(judged, target_speedup=self.target_speedup, limit=self.output_limit) + "\n\n" + note)
        breakdown = self._reference_breakdown()
        parts = [feedback.describe(judged, target_speedup=self.target_speedup, limit=self.output_limit), breakdown_table(breakdown)]
        extra: dict[str, Any] = {"breakdown": breakdown}
        if self.judge.device == "cuda" and judged.verdict.status.value == "correct":
            extra["ncu"] = self._ncu_for(judged)
            parts.append(ncu_table(extra["ncu"]))
        return self._judged(judged, text="\n\n".join(parts), data=extra)

    def _submit(self, args: dict[str, Any]) -> ToolResult:
        self._require_candidate()
        judged = self.judge.full(self.workspace.candidate_path)
        text = feedback.describe(judged, target_speedup=self.target_speedup, limit=self.output_limit) + "\n\nsubmitted."
        return self._judged(judged, text=text, data={"note": str(args.get("note") or "")}, submitted=True)

    def _reference_breakdown(self) -> dict[str, Any]:
        """The reference's breakdown, measured once per Tools."""
        if self._breakdown is None:
            gpu = self.judge.objective.policy().gpu_index
            with self.judge.device_lock:
                self._breakdown = reference_breakdown(self.judge.problem, device=self.judge.device, gpu_index=gpu,
                                                      size=self.judge.objective.size)
        return self._breakdown

    def _ncu_for(self, judged: Judged) -> dict[str, Any]:
        """ncu's figures for the judged candidate, with the problem at the size its verdict used,
        measured once per candidate and size."""
        size = judged.verdict.problem.get("size") or "full"
        key = f"{judged.candidate_hash}:{size}"
        if key not in self._ncu:
            policy = self.judge.objective.policy()
            with self.judge.device_lock:  # confined as the policy's sandbox confines the judge's own tools
                self._ncu[key] = ncu_metrics(self.judge.problem, self.workspace.candidate_path, device=self.judge.device,
                                             gpu_index=policy.gpu_index, size=size, sandbox_mode=policy.sandbox)
        return self._ncu[key]

    def _judged(self, judged: Judged, *, text: str | None = None, data: dict[str, Any] | None = None, submitted: bool = False) -> ToolResult:
        if text is None:
            text = feedback.describe(judged, target_speedup=self.target_speedup, limit=self.output_limit)
        info = {"mode": judged.mode, "verdict_id": judged.verdict_id, "status": judged.verdict.status.value, **(data or {})}
        return ToolResult(text=text, verdict=judged.verdict.to_dict(), candidate_hash=judged.candidate_hash,
                          submitted=submitted, data=info)


def _syntax_note(code: str) -> str:
    """A warning when Python text does not parse ('' when it does)."""
    try:
        pysource.parse(code)
    except SyntaxError as exc:
        return f"\nwarning: this file does not parse: line {exc.lineno}: {exc.msg}"
    return ""


_EXAMPLES = {
    "list_files": "{}", "read_file": '{"path": "model_new.py"}', "write_file": '{"path": "model_new.py", "content": "..."}',
    "compile": "{}", "verify": "{}", "profile": "{}", "submit": '{"note": "one kernel per row, ..."}',
}


def _example(name: str) -> str:
    return _EXAMPLES.get(name, "{}")
