"""Where a bench's candidates come from: folders of files named after the problems, agent runs, or,
when no source is named, the solution beside each problem.

A folder gives, for a problem NAME, `NAME.py` (a single-file candidate) or `NAME/` (a folder holding
model_new.py and its kernels), at its top or under `levelN/`. A run gives the candidate its run kept
as best, taken from the store. Beside the problem: a problem file `DIR/problem.py` whose folder holds
`DIR/model_new.py` (the shipped examples' layout) has that folder as its candidate, as `demo` judges it. One candidate per problem: two sources naming the same problem are a
usage error, never a silent choice (picking the best of several would be best-of-trajectory
selection).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from kernelwright.errors import UsageError
from kernelwright.judge.snapshot import read_candidate
from kernelwright.problems.suite import Entry

@dataclass(frozen=True)
class Solution:
    """One problem's candidate, as found."""

    source: str  # "path" or "run"
    ref: str  # the file or folder, or the run id
    main: str  # the candidate's main file among `files`
    files: dict[str, str] = field(default_factory=dict)  # {relative name: text}; empty when a run kept none
    run: Optional[dict[str, Any]] = None  # the run's id, status, strategy, model and progress
    error: str = ""  # why the judge cannot take it (malformed, too large): a failure, never skipped

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "ref": self.ref, "main": self.main, "files": self.files}


def _in_folder(root: Path, name: str, level: Optional[int]) -> Optional[Path]:
    bases = [root] + ([root / f"level{level}"] if level is not None else [])
    for base in bases:
        if (base / name / "model_new.py").is_file():
            return base / name
        if (base / f"{name}.py").is_file():
            return base / f"{name}.py"
    return None


def _from_path(found: Path) -> Solution:
    """A folder is a whole candidate; a single file is judged alone as model_new.py (its neighbours are
    other problems' candidates, not its sources)."""
    try:
        if found.is_dir():
            files = read_candidate(found)
            return Solution("path", str(found), "model_new.py", files)
        return Solution("path", str(found), "model_new.py", {"model_new.py": found.read_text(encoding="utf-8")})
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return Solution("path", str(found), "model_new.py", error=f"the judge could not take the candidate: {exc}"[:2000])


def folder_solutions(root: Path, entries: Sequence[Entry]) -> dict[str, Solution]:
    """{problem name: solution} for the problems that have a file or folder under root."""
    out = {}
    for e in entries:
        found = _in_folder(root, e.problem.name, e.level)
        if found is not None:
            out[e.problem.name] = _from_path(found)
    return out


def beside_solutions(entries: Sequence[Entry]) -> dict[str, Solution]:
    """{problem name: solution} for the problems written as DIR/problem.py beside DIR/model_new.py."""
    return {e.problem.name: _from_path(e.problem.path.parent) for e in entries
            if e.problem.path.name == "problem.py" and (e.problem.path.parent / "model_new.py").is_file()}


def unmatched_files(root: Path, entries: Sequence[Entry]) -> list[str]:
    """Candidates under root (or root/levelN) that the bench did not take: named after no problem
    of the suite, or in another level's folder (worth a warning)."""
    taken = {str(_in_folder(root, e.problem.name, e.level)) for e in entries}
    found = []
    for folder in [root] + sorted(p for p in root.glob("level*") if p.is_dir()):
        for p in sorted(folder.iterdir()):
            is_candidate = (p.suffix == ".py" and p.is_file()) or (p / "model_new.py").is_file()
            if is_candidate and str(p) not in taken and not p.name.startswith(("_", ".")):
                found.append(str(p.relative_to(root)))
    return found


def run_progress(run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Best speedup against the faster baseline per round: a tree round is its `rN` branches (after
    a resume they read `xK/rN/...`); for the other strategies every judged candidate is a round."""
    from kernelwright.agent.history import candidate_rows

    rounds: dict[str, list[dict[str, Any]]] = {}
    for i, row in enumerate(candidate_rows(steps)):
        m = re.search(r"(?:^|/)r(\d+)/", row.get("branch") or "") if run.get("strategy") == "tree" else None
        rounds.setdefault(f"r{m.group(1)}" if m else str(i), []).append(row)
    out, best = [], None
    for i, (label, rows) in enumerate(rounds.items()):
        speeds = [r["speedup_vs_best"] for r in rows if r.get("status") == "correct" and r.get("speedup_vs_best")]
        top = max(speeds) if speeds else None
        best = top if best is None or (top is not None and top > best) else best
        out.append({"round": i, "label": label, "candidates": len(rows), "correct": sum(r.get("status") == "correct" for r in rows),
                    "best_speedup_vs_best": top, "best_so_far": best})
    return out


def run_choice(run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> tuple[Optional[str], Optional[dict[str, Any]], str]:
    """(candidate hash, its verdict, note) of what a run delivered. The exported candidate, with the
    final re-judge that passed; if final re-judges ran and none passed, nothing; if none ran (a
    paused run), the search's best, and the note says it was selected among noisy measurements."""
    from kernelwright.agent.history import best_verdict

    finals = [s["payload"] for s in steps if s.get("kind") == "final" and isinstance(s.get("payload"), dict)]
    exports = [s["payload"] for s in steps if s.get("kind") == "export" and isinstance(s.get("payload"), dict)]
    failed = [f for f in finals if not exports or f.get("candidate_hash") != exports[-1].get("candidate_hash")]
    tried = f"{len(finals)} final re-judge(s) on fresh seeds" + (f", {len(failed)} of them not passed" if failed else "")
    if exports:
        chosen = exports[-1].get("candidate_hash")
        verdict = next((f.get("verdict") for f in reversed(finals) if f.get("candidate_hash") == chosen), None)
        return chosen, verdict, f"the exported candidate; {tried}"
    if finals:
        return None, None, f"no verified candidate: {tried}, none passed"
    _, verdict = best_verdict(run, steps)
    chosen = (run.get("best") or {}).get("candidate_hash")
    if not chosen:
        return None, None, "the run kept no verified candidate"
    return chosen, verdict, "no final re-judge ran: the search's best, selected among noisy measurements"


def run_solution(db: Any, run_id: str) -> tuple[dict[str, Any], Solution]:
    """(the run's row, the solution it delivered: see run_choice); no files when it delivered none."""
    try:
        run = db.get_run(run_id)
    except (KeyError, ValueError) as exc:
        raise UsageError(f"{run_id}: neither a folder nor a run ({exc.args[0] if exc.args else exc})") from None
    steps = db.run_steps(run["id"])
    chosen, verdict, note = run_choice(run, steps)
    info = {"id": run["id"], "status": run.get("status"), "strategy": run.get("strategy"), "model": run.get("model"),
            "progress": run_progress(run, steps), "candidate_hash": chosen, "verdict": verdict, "note": note}
    files: dict[str, str] = {}
    stored_main = None
    if chosen:
        try:
            record = db.get_candidate(chosen)
        except KeyError:
            raise UsageError(f"{run['id']}: the store has no files for its candidate {chosen[:12]}") from None
        files, stored_main = record["files"], record["main"]
    main = stored_main or ("model_new.py" if "model_new.py" in files or not files else next(iter(files)))
    return run, Solution("run", run["id"], main, files, info)


def _match_run(run: dict[str, Any], entries: Sequence[Entry]) -> Entry:
    by_hash = [e for e in entries if e.problem.hash == run.get("problem_hash")]
    exact = [e for e in by_hash if e.problem.name == run.get("problem_name")]
    if exact or len(by_hash) == 1:
        return (exact or by_hash)[0]
    if by_hash:
        raise UsageError(f"{run['id']}: {len(by_hash)} problems of the suite have its problem's text and none is named {run.get('problem_name')!r}")
    named = [e for e in entries if e.problem.name == run.get("problem_name")]
    if named:
        raise UsageError(f"{run['id']} was made on another version of {named[0].problem.name} "
                         f"(problem hash {str(run.get('problem_hash'))[:12]}, the suite's is {named[0].problem.hash[:12]})")
    raise UsageError(f"{run['id']} is for {run.get('problem_name')!r}, which is not in the suite")


def _add(found: dict[str, Solution], name: str, sol: Solution) -> None:
    if name in found:
        raise UsageError(f"two solutions for {name}: {found[name].ref} and {sol.ref}; a bench judges one candidate per problem")
    found[name] = sol


def find_solutions(sources: Sequence[str], entries: Sequence[Entry], store: Optional[Path]) -> tuple[dict[str, Solution], list[str]]:
    """({problem name: solution}, warnings) from folders and run ids, in the order given; with no
    source, the solutions beside the problems (a usage error when no problem has one)."""
    if not sources:
        found = beside_solutions(entries)
        if not found:
            raise UsageError("no --solutions given, and no problem of the suite is a DIR/problem.py with DIR/model_new.py beside it; "
                             "name a folder of candidates or a run id")
        return found, []
    found: dict[str, Solution] = {}
    warnings: list[str] = []
    runs = [s for s in sources if not Path(s).exists()]
    for src in sources:
        if src in runs:
            continue
        root = Path(src)
        if not root.is_dir():
            raise UsageError(f"{src}: solutions are a folder of candidates named after the problems, or a run id")
        for name, sol in folder_solutions(root, entries).items():
            _add(found, name, sol)
        stray = unmatched_files(root, entries)
        if stray:
            warnings.append(f"{src}: {len(stray)} candidate(s) named after no problem of the suite: {', '.join(stray[:8])}")
    if runs:
        from kernelwright.store import Store

        with Store.open(store) as db:
            for ref in runs:
                run, sol = run_solution(db, ref)
                _add(found, _match_run(run, entries).problem.name, sol)
    return found, warnings
