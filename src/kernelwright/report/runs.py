"""A run of the agent as a one-problem bench document, so `report` and `compare` take runs too.

The candidate and verdict are those `bench RUN` takes (solutions.run_choice): the exported candidate
with the final re-judge it passed, and the row's note counts the final re-judges that did not pass;
for a run that never reached its final re-judge, the search's best, and the note says so.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from kernelwright.report.metrics import MISSING, Bootstrap, bench_metrics, outcome_of


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
        reference = _reference(db, run["problem_hash"])
    verdict = sol.run["verdict"]
    row = {"name": run["problem_name"], "spec": run["problem_spec"], "level": None, "category": None,
           "problem_hash": run["problem_hash"], "reference_source": reference, "solution": sol.to_dict() if sol.files else None,
           "status": verdict.get("status") if verdict else MISSING, "verdict": verdict, "verdict_id": None, "note": sol.run["note"],
           "run": {k: v for k, v in sol.run.items() if k != "verdict"}}
    system = dict((verdict or {}).get("system") or {"gpu": None})
    return {"kind": KIND, "schema_version": SCHEMA_VERSION, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "complete": True, "pending": [], "label": run["id"], "suite": run["problem_spec"], "only": [], "solutions": [run["id"]],
            "device": "cuda" if system.get("gpu") else "cpu", "system": system, "policy": (verdict or {}).get("policy") or {},
            "bootstrap": boot.to_dict(), "problems": [row], "metrics": bench_metrics([outcome_of(row)], boot)}
