"""A run of the agent as a one-problem bench document, so `report` and `compare` take runs too.

The verdict shown is the run's final re-judge (fresh seeds) when one ran; otherwise the verdict of the
candidate the run kept as best, and the row's note says so, since that one was selected among noisy
measurements.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from kernelwright.errors import UsageError
from kernelwright.report.metrics import MISSING, Bootstrap, bench_metrics, outcome_of


def _verdict_and_note(run: dict[str, Any], steps: list[dict[str, Any]]) -> tuple[Optional[dict[str, Any]], Optional[str], str]:
    """(verdict, candidate hash, note) for the run's result."""
    from kernelwright.agent.history import best_verdict, final_verdict

    final_hash, final = final_verdict(steps)
    if final is not None:
        return final, final_hash, "the run's final re-judge on fresh seeds"
    _, best = best_verdict(run, steps)
    if best is not None:
        return best, (run.get("best") or {}).get("candidate_hash"), "the run's best as judged during the run (no final re-judge ran)"
    return None, None, "the run kept no verified candidate"


def _files(db: Any, candidate_hash: Optional[str]) -> dict[str, str]:
    if not candidate_hash:
        return {}
    try:
        return db.get_candidate_files(candidate_hash)
    except KeyError:
        return {}


def _reference(db: Any, problem_hash: str) -> str:
    try:
        return db.get_problem(problem_hash)["source"]
    except KeyError:
        return ""


def bench_from_run(ref: str, store: Optional[Path], boot: Bootstrap = Bootstrap()) -> dict[str, Any]:
    """The bench document of one run: its problem, its result and its progress per round."""
    from kernelwright.report.bench import KIND, SCHEMA_VERSION
    from kernelwright.report.solutions import run_solution
    from kernelwright.store import Store

    with Store.open(store) as db:
        run, sol = run_solution(db, ref)
        steps = db.run_steps(run["id"])
        verdict, cand_hash, note = _verdict_and_note(run, steps)
        files = _files(db, cand_hash) or sol.files
        reference = _reference(db, run["problem_hash"])
    if verdict is not None and not files:
        raise UsageError(f"{run['id']}: the store has no files for candidate {str(cand_hash)[:12]}")
    row = {"name": run["problem_name"], "spec": run["problem_spec"], "level": None, "category": None,
           "problem_hash": run["problem_hash"], "reference_source": reference,
           "solution": {"source": "run", "ref": run["id"], "main": sol.main, "files": files} if files else None,
           "status": verdict.get("status") if verdict else MISSING, "verdict": verdict, "verdict_id": None, "note": note, "run": sol.run}
    system = dict((verdict or {}).get("system") or {"gpu": None})
    return {"kind": KIND, "schema_version": SCHEMA_VERSION, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "complete": True, "pending": [], "label": run["id"], "suite": run["problem_spec"], "only": [], "solutions": [run["id"]],
            "device": "cuda" if system.get("gpu") else "cpu", "system": system, "policy": (verdict or {}).get("policy") or {},
            "bootstrap": boot.to_dict(), "problems": [row], "metrics": bench_metrics([outcome_of(row)], boot)}
