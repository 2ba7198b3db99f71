"""The end of a run: the re-judged winner becomes a drop-in package (agent.export) with the run's
recording beside it (agent.replay's format), and the run's row says how it ended. `review` carries
an engineer's decision into an earlier export.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from kernelwright.agent import history
from kernelwright.agent.export import ExportInfo, export_package, is_export, write_review
from kernelwright.core.runs import RunStatus, StepKind
from kernelwright.agent.replay import write_recording

RECORDING = "recording.json"


def default_out_dir(store_path: Path, run_id: str) -> Path:
    """runs/RUN_ID beside the store file."""
    return store_path.parent / "runs" / run_id


def next_out_dir(earlier: Path) -> Path:
    """The first free folder DIR-2, DIR-3, ... beside an earlier export DIR."""
    n = 2
    while (earlier.parent / f"{earlier.name}-{n}").exists():
        n += 1
    return earlier.parent / f"{earlier.name}-{n}"


def finish(ctx: Any, reason: str, entry: Any, judged: Any, files: dict[str, str], state: dict[str, Any]) -> Any:
    """Export the re-judged winner and its recording; mark the run succeeded or finished."""
    from kernelwright.agent.optimize import SLIM_KEYS, RunResult

    runlog, db = ctx.runlog, ctx.runlog.db()
    run = db.get_run(runlog.run_id)
    meta = state.get("meta") or {}
    out_dir = Path(meta.get("out_dir") or run.get("out_dir") or default_out_dir(db.path, runlog.run_id))
    verdict = judged.verdict.to_dict()
    met = ctx.target_met(verdict)
    status = RunStatus.SUCCEEDED if met else RunStatus.FINISHED
    steps = db.run_steps(runlog.run_id)
    prov = provenance(ctx, run, meta)
    same = _last_export_hash(steps) == judged.candidate_hash  # a review stands for the candidate it reviewed
    info = ExportInfo(run_id=runlog.run_id, problem_name=ctx.problem.name, problem_hash=ctx.problem.hash, problem_spec=run["problem_spec"],
                      model=ctx.backend.name, strategy=ctx.objective.strategy, objective=ctx.objective.to_dict(),
                      candidate_hash=judged.candidate_hash, files=files, verdict=verdict,
                      search_verdict={k: entry.verdict.get(k) for k in SLIM_KEYS}, history=tuple(history.candidate_rows(steps)),
                      totals=db.run_totals(runlog.run_id), approved=run.get("approved") if same else None,
                      review_note=(run.get("review_note") or "") if same else "", reviewed_at=_reviewed_at(steps) if same else None,
                      provenance=prov, extras={RECORDING: recording_text(ctx, steps, prov)})
    export_package(out_dir, info)
    review_gone = ""
    if run.get("approved") is not None and not same:
        db.clear_review(runlog.run_id)  # the earlier review was of another candidate
        review_gone = (f"; the earlier review ({history.review_text(run.get('approved'), run.get('review_note'))}) was of another "
                       f"candidate and stays with its export in {run.get('out_dir') or '-'}: this one is not reviewed")
    s = verdict.get("speedup_vs_best")
    summary = (f"{status.value}: {reason}; exported {entry.key} ({judged.candidate_hash[:12]}): re-judged on fresh seeds "
               + (f"{verdict.get('runtime_ms'):.4g} ms, {s:.3f}x the faster baseline" if s else "correct")
               + (f" (target {ctx.objective.target_speedup:g}x met)" if met else
                  (f" (target {ctx.objective.target_speedup:g}x not met)" if ctx.objective.target_speedup else ""))
               + review_gone)
    runlog.step(StepKind.EXPORT, {"out_dir": str(out_dir), "candidate_hash": judged.candidate_hash, "verdict_id": judged.verdict_id})
    runlog.update(status=status, out_dir=str(out_dir), summary=summary)
    runlog.say(summary)
    runlog.say(f"exported to {out_dir}")
    return RunResult(runlog.run_id, status, summary, verdict, out_dir)


def _reviewed_at(steps: list[dict[str, Any]]) -> str | None:
    """When the run's latest review was recorded (its review step's time), or None."""
    reviews = [s for s in steps if s["kind"] == StepKind.REVIEW.value]
    if not reviews or not reviews[-1].get("created_at"):
        return None
    return datetime.fromisoformat(reviews[-1]["created_at"]).isoformat(timespec="seconds")  # the form `review` writes


def _last_export_hash(steps: list[dict[str, Any]]) -> str | None:
    exports = [s for s in steps if s["kind"] == StepKind.EXPORT.value]
    return exports[-1]["payload"].get("candidate_hash") if exports else None


def provenance(ctx: Any, run: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Where the run came from: backend, server, device, commit; for a replay, the recording's own provenance."""
    prov: dict[str, Any] = {"run_id": run["id"], "made_by": "kernelwright optimize", "backend": ctx.backend.name, "base_url": meta.get("base_url"),
                            "device": ctx.device, "commit": git_commit(), "note": meta.get("note") or None, "replayed": ctx.replay}
    if ctx.replay:
        prov["recording"] = ctx.backend.path
        prov["recording_provenance"] = ctx.backend.recording.get("provenance")
    return prov


def recording_text(ctx: Any, steps: list[dict[str, Any]], prov: dict[str, Any]) -> str:
    """The run's model turns as a recording, replayable with `--model replay:FILE`; the verdicts
    ride along for divergence reports only."""
    turns = [{"key": s["payload"]["key"], "reply": s["payload"]["reply"]} for s in steps if s["kind"] == StepKind.RESPONSE.value]
    verdicts = [{"key": s["payload"].get("key", ""), "status": (s["payload"].get("verdict") or {}).get("status"),
                 "runtime_ms": (s["payload"].get("verdict") or {}).get("runtime_ms"),
                 "speedup_vs_best": (s["payload"].get("verdict") or {}).get("speedup_vs_best")}
                for s in steps if s["kind"] == StepKind.CANDIDATE.value]
    problem = {"name": ctx.problem.name, "hash": ctx.problem.hash, "source": ctx.problem.source}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / RECORDING
        write_recording(path, provenance=prov, problem=problem, objective=ctx.objective, strategy=ctx.objective.strategy,
                        turns=turns, recorded_verdicts=verdicts)
        return path.read_text()


def check_out_dir(out_dir: Path) -> None:
    """Refuse, before a run starts, an --out folder the export could not replace (a folder with
    other content than an earlier export, or a file)."""
    from kernelwright.agent.export import _check_target

    try:
        _check_target(Path(out_dir))
    except ValueError as exc:
        raise ValueError(f"--out: {exc}") from None


def review(run: dict[str, Any], *, approved: bool, note: str) -> str | None:
    """Carry a review into the run's export when that folder still holds this run's export;
    returns the folder written, or None."""
    out_dir = run.get("out_dir")
    if not out_dir or not is_export(out_dir):
        return None
    exported = json.loads((Path(out_dir) / "run.json").read_text())
    if exported.get("run_id") != run["id"]:
        return None  # another run's export took the folder since
    write_review(out_dir, approved=approved, note=note)
    return out_dir


def git_commit() -> str | None:
    """The source's commit: $KERNELWRIGHT_COMMIT when set (a copied tree whose .git is not its
    own), else the checkout's HEAD, marked "+dirty" when tracked files differ from it."""
    if os.environ.get("KERNELWRIGHT_COMMIT"):
        return os.environ["KERNELWRIGHT_COMMIT"]
    root = Path(__file__).resolve().parents[3]
    if 'name = "kernelwright"' not in _read(root / "pyproject.toml"):
        return None  # an installed copy: the folder above is not kernelwright's checkout
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0 or not head.stdout.strip():
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=30)
        return head.stdout.strip() + ("+dirty" if dirty.returncode != 0 or dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
