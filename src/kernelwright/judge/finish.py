"""What evaluate() does to a flow's verdict before handing it back: compute-sanitizer's findings
attached where the policy asks for them, and the messages naming the candidate's files as the
caller named them rather than the judge's private copies.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kernelwright.core.records import BuildPath, Status, Verdict
from kernelwright.judge import extension
from kernelwright.judge.build import cache_dir
from kernelwright.judge.gpulock import device_lock
from kernelwright.judge.workers import physical_gpu

if TYPE_CHECKING:
    from kernelwright.judge.evaluate import Flow


def as_given(verdict: Verdict, copies: list[Path], candidate: str | Path, shown_as: str | None) -> Verdict:
    """The verdict with its messages naming the candidate's files as the caller named them
    (`shown_as`: the candidate's folder; default the folder of `candidate` as given), not the
    private copies the judge made of them (judge.snapshot, a spare child's inputs)."""
    given = Path(candidate)
    root = str(shown_as) if shown_as is not None else str(given if given.is_dir() else given.parent)
    prefix = "" if root in ("", ".") else root.rstrip("/") + "/"

    def named(text: str) -> str:
        for copy in copies:
            for path in dict.fromkeys((str(copy), str(copy.resolve()))):
                text = text.replace(path + "/", prefix).replace(path, root or ".")
        return text

    guards = tuple(dataclasses.replace(g, detail=named(g.detail)) for g in verdict.guards)
    return dataclasses.replace(verdict, log=named(verdict.log), guards=guards)


SANITIZED = (Status.CORRECT, Status.INCORRECT, Status.RUNTIME_ERROR, Status.REJECTED)  # the candidate built and imported


def with_sanitizer(flow: "Flow", verdict: Verdict, say: Callable[[str], None]) -> Verdict:
    """Attach compute-sanitizer's findings (judge.sanitize); the status stays what the judge said."""
    from kernelwright.judge import sanitize

    if flow.device != "cuda":
        result: dict[str, Any] = {"ran": False, "reason": "CPU backend: compute-sanitizer checks CUDA kernels", "tools": []}
    elif verdict.status not in SANITIZED:
        result = {"ran": False, "reason": f"status {verdict.status.value}: no candidate to run", "tools": []}
    else:
        say("running the candidate under compute-sanitizer (memcheck, racecheck, initcheck)")
        files = getattr(flow, "files", None)
        ext = files is not None and files.build_path == BuildPath.TORCH_EXTENSION
        env = {"KERNELWRIGHT_CACHE": str(cache_dir()), **(extension.env(flow.vb.candidate["hash"]) if ext else {})}
        try:
            with device_lock(flow.device, flow.policy.gpu_index, "shared", what="running compute-sanitizer", progress=say):
                result = sanitize.run(flow.problem.path, flow.candidate_path, gpu_index=physical_gpu(flow.policy.gpu_index), env=env,
                                      timeout_s=flow.policy.sanitize_timeout_s, sandbox_mode=flow.policy.sandbox, size=flow.vb.size)
        except Exception as exc:  # noqa: BLE001 - the sanitizer is advisory: its failure must not lose the verdict
            result = {"ran": False, "reason": f"the sanitizer run failed: {type(exc).__name__}: {exc}"[:300], "tools": []}
        say(sanitize.describe(result))
    return dataclasses.replace(verdict, sanitizer=result)
