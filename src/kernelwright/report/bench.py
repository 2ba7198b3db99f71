"""`kernelwright bench`: judge one candidate per problem of a suite and compute the metrics.

Every candidate is judged afresh here (fresh secret seeds, baselines timed beside it unless the policy
takes cached ones), never taken from the verdict a run kept: a run's best was selected on noisy
measurements, and re-judging removes that selection's bias from the claim. Every verdict goes into the
bench document, failures and missing solutions included. With `-o`, the document is rewritten after
every problem (marked incomplete until the end), so a crash loses at most the problem being judged,
and `--resume` takes the finished ones back.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from kernelwright.core.records import Status
from kernelwright.errors import UsageError
from kernelwright.problems.suite import Entry, load_suite
from kernelwright.problems.loader import ProblemError
from kernelwright.report.metrics import INVALID, MISSING, PROBLEM_ERROR, Bootstrap, bench_metrics, outcome_of
from kernelwright.report.solutions import Solution, find_solutions

KIND = "kernelwright.bench"
SCHEMA_VERSION = 1
Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """What to bench and where the results go."""

    suite: str  # suite spec (builtin, builtin:LEVEL, kernelbench:PATH[:LEVEL], a folder)
    sources: tuple[str, ...]  # solution folders and run ids; none: the model_new.py beside each DIR/problem.py
    only: tuple[str, ...] = ()  # problem names to keep (all when empty)
    device: str = "auto"  # auto, cuda or cpu
    store: Optional[Path] = None  # SQLite store (baselines, runs, verdicts)
    keep: bool = True  # record every verdict in the store
    out: Optional[Path] = None  # the bench JSON, rewritten after every problem
    resume: bool = False  # reuse finished problems from `out`
    boot: Bootstrap = Bootstrap()  # how intervals are drawn
    pool: Any = None  # a client.pool.Pool: every candidate sent at once, judged by its workers (only this process writes)

    def __post_init__(self) -> None:
        if self.resume and self.out is None:
            raise ValueError("--resume needs -o FILE (the bench to resume)")


def select_entries(suite: str, only: Sequence[str]) -> list[Entry]:
    """The suite's problems, kept to `only` when given (an unknown name is a usage error)."""
    entries = load_suite(suite)
    if not only:
        return entries
    names = {e.problem.name for e in entries}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise UsageError(f"not in {suite}: {', '.join(unknown)}")
    return [e for e in entries if e.problem.name in set(only)]


def _materialise(sol: Solution, root: Path) -> Path:
    """Write the solution's files under root; the path the judge takes (folder or main file)."""
    for name, text in sol.files.items():
        target = (root / name).resolve()
        if root.resolve() not in target.parents:
            raise ValueError(f"{sol.ref}: file name {name!r} leaves the candidate folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root if sol.main == "model_new.py" else root / sol.main


def judge_solution(entry: Entry, sol: Solution, policy: Any, config: BenchConfig, say: Say) -> tuple[Any, Optional[str], str, str]:
    """(verdict or None, verdict id, note, row status). A candidate the judge cannot take (malformed,
    too large) and a problem that fails to load get no verdict, a status of their own and the note;
    both stay failures in every denominator. The device and lock settings are checked before the
    first problem (check_environment), so a ValueError here is the candidate's."""
    from kernelwright.client import Judge

    with tempfile.TemporaryDirectory(prefix="kw-bench-") as tmp:
        try:
            path = _materialise(sol, Path(tmp))  # judged in process, or by the service KERNELWRIGHT_SERVICE names
            verdict = Judge(device=config.device).evaluate(entry.problem, path, policy, progress=say, baseline_store=config.store)
        except ProblemError as exc:
            return None, None, f"the problem did not load: {exc}"[:2000], PROBLEM_ERROR
        except ValueError as exc:
            return None, None, f"the judge could not take the candidate: {exc}"[:2000], INVALID
    return (verdict, *_keep(entry, sol, verdict, config), verdict.status.value)


def _sent(entry: Entry, sol: Solution, policy: Any, pool: Any) -> Any:
    """The pool's future of the verdict, or the (None, None, note, status) a refused candidate gets.
    The request carries the files, so the folder can go once it is sent."""
    with tempfile.TemporaryDirectory(prefix="kw-bench-") as tmp:
        try:
            return pool.submit(entry.problem, _materialise(sol, Path(tmp)), policy)
        except ValueError as exc:
            return None, None, f"the judge could not take the candidate: {exc}"[:2000], INVALID


def _received(entry: Entry, sol: Solution, sent: Any, config: BenchConfig) -> tuple[Any, Optional[str], str, str]:
    """judge_solution's answer for a candidate sent to the pool."""
    try:
        verdict = sent.result()
    except ProblemError as exc:
        return None, None, f"the problem did not load: {exc}"[:2000], PROBLEM_ERROR
    except ValueError as exc:
        return None, None, f"the judge could not take the candidate: {exc}"[:2000], INVALID
    except Exception as exc:  # noqa: BLE001 - the judge failed in a worker (the in-process judge would raise): a row, judged again on --resume
        return None, None, f"the judge failed in a pool worker: {type(exc).__name__}: {exc}"[:2000], Status.INFRA_ERROR.value
    return (verdict, *_keep(entry, sol, verdict, config), verdict.status.value)


def _pooled(config: BenchConfig, policy: Any, entries: list[Entry], solutions: dict[str, Any], done: dict[str, dict[str, Any]],
            device: str, n_suite: int, on_start: Callable[[int, int, str], None]) -> dict[str, Any]:
    """The bench through a pool: every candidate sent at once, each row recorded (the store, then
    `out`) as its verdict arrives, so a driver that dies loses only the verdicts not yet back;
    the rows stay in suite order."""
    pdict = policy.to_dict()
    rows: dict[str, dict[str, Any]] = {}
    sent: dict[Any, tuple[Entry, Any]] = {}
    for e in entries:
        name, sol = e.problem.name, solutions.get(e.problem.name)
        if _reusable(done.get(name), e, sol):
            rows[name] = done[name]
        elif sol is not None and sol.error:
            rows[name] = problem_row(e, sol, note=sol.error, status=INVALID)
        elif sol is None or not sol.files:
            rows[name] = problem_row(e, sol)
        else:
            answer = _sent(e, sol, policy, config.pool)
            if isinstance(answer, tuple):  # refused before it was sent
                rows[name] = problem_row(e, sol, *answer)
            else:
                sent[answer] = (e, sol)

    def write() -> None:
        if config.out is not None:
            write_json(document(config, pdict, [rows[e.problem.name] for e in entries if e.problem.name in rows], device,
                                [e.problem.name for e in entries if e.problem.name not in rows], n_suite), config.out)

    write()
    for fut in concurrent.futures.as_completed(sent):
        e, sol = sent[fut]
        on_start(len(rows), len(entries), e.problem.name)
        rows[e.problem.name] = problem_row(e, sol, *_received(e, sol, fut, config))
        write()
    return document(config, pdict, [rows[e.problem.name] for e in entries], device, (), n_suite)


def check_environment(device: str, policy: Any) -> str:
    """The resolved device; a usage error for a bad device, GPU index or lock setting, before any
    problem is judged (inside the loop they would read as the candidates' failures)."""
    from kernelwright.judge.evaluate import gpu_lock_enabled, physical_gpu, resolve_device

    try:
        dev = resolve_device(device)
        if dev == "cuda":
            physical_gpu(policy.gpu_index)
        gpu_lock_enabled()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return dev


def _keep(entry: Entry, sol: Solution, verdict: Any, config: BenchConfig) -> tuple[Optional[str], str]:
    """(verdict id, note); a store failure is a note, never a lost verdict."""
    if not config.keep:
        return None, ""
    from kernelwright.store import Store

    try:
        with Store.open(config.store) as db:
            return db.keep_verdict(entry.problem, sol.files, verdict, sol.main), ""
    except Exception as exc:  # noqa: BLE001
        return None, f"verdict not stored: {type(exc).__name__}: {exc}"[:300]


def problem_row(entry: Entry, sol: Optional[Solution], verdict: Any = None, verdict_id: Optional[str] = None, note: str = "",
                status: str = MISSING) -> dict[str, Any]:
    """One problem's row of the bench document."""
    v = verdict.to_dict() if verdict is not None else None
    run = {k: val for k, val in sol.run.items() if k != "verdict"} if sol is not None and sol.run else None
    if sol is None:
        note = note or "no solution found"
    elif not sol.files:
        note = note or f"{sol.ref} delivered no candidate"
    if run and run.get("note"):
        note = "; ".join(x for x in (f"{sol.ref}: {run['note']}", note) if x)
    return {"name": entry.problem.name, "spec": entry.spec, "level": entry.level, "category": entry.category,
            "problem_hash": entry.problem.hash, "reference_source": entry.problem.source,
            "solution": sol.to_dict() if sol is not None else None, "status": v["status"] if v else status,
            "verdict": v, "verdict_id": verdict_id, "note": note, "run": run}


def _commit() -> Optional[str]:
    """$KERNELWRIGHT_COMMIT, else the checkout this package runs from (`-dirty` with local changes);
    None for an installed package outside a checkout of its own."""
    if os.environ.get("KERNELWRIGHT_COMMIT"):
        return os.environ["KERNELWRIGHT_COMMIT"]
    here = Path(__file__).resolve().parent

    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], capture_output=True, text=True, timeout=10, cwd=here)
        return done.stdout.strip() if done.returncode == 0 else ""

    try:
        top = git("rev-parse", "--show-toplevel")
        if not top or not (Path(top) / "src" / "kernelwright" / "report").resolve() == here:
            return None
        return git("describe", "--always", "--dirty", "--abbrev=12") or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def bench_system(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where the verdicts ran (from the first one), with the commit; versions only when none ran."""
    from kernelwright import __version__

    system = next((r["verdict"]["system"] for r in rows if r.get("verdict") and r["verdict"].get("system")), None)
    system = dict(system) if system else {"gpu": None, "python": platform.python_version(), "kernelwright": __version__}
    system["commit"] = _commit()
    return system


SYSTEM_KEYS = ("gpu", "driver", "cuda", "torch")  # verdicts that differ in these were not judged alike


def warnings_of(rows: Sequence[dict[str, Any]], n_suite: int, only: Sequence[str]) -> list[str]:
    """What a reader must know before trusting the metrics: mixed machines, a subset of the suite."""
    out = []
    seen = {tuple((r["verdict"].get("system") or {}).get(k) for k in SYSTEM_KEYS) for r in rows if r.get("verdict")}
    if len(seen) > 1:
        out.append("the verdicts come from different machines or versions: " + "; ".join(
            ", ".join(f"{k} {v}" for k, v in zip(SYSTEM_KEYS, s)) for s in sorted(seen, key=str)))
    if only:
        out.append(f"a subset: {len(rows)} of the suite's {n_suite} problems (--only); the rates are over the subset")
    return out


def document(config: BenchConfig, policy: dict[str, Any], rows: list[dict[str, Any]], device: str, pending: Sequence[str] = (),
             n_suite: Optional[int] = None) -> dict[str, Any]:
    """The bench document: provenance, policy, every row, and the metrics over the rows."""
    n_suite = len(rows) + len(pending) if n_suite is None else n_suite
    return {"kind": KIND, "schema_version": SCHEMA_VERSION, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "complete": not pending, "pending": list(pending), "suite": config.suite, "n_suite_problems": n_suite,
            "only": list(config.only), "solutions": list(config.sources), "device": device, "system": bench_system(rows),
            "warnings": warnings_of(rows, n_suite, config.only), "policy": policy, "bootstrap": config.boot.to_dict(),
            "problems": rows, "metrics": bench_metrics([outcome_of(r) for r in rows], config.boot)}


def write_json(doc: dict[str, Any], path: Path) -> None:
    """Write atomically: a crash mid-write leaves the previous file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


def load_bench(path: Path) -> dict[str, Any]:
    """A bench document from disk; a usage error when it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable bench JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise UsageError(f"{path}: not a kernelwright bench (kind {doc.get('kind') if isinstance(doc, dict) else None!r})")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"{path}: bench schema_version {doc.get('schema_version')}, this kernelwright reads {SCHEMA_VERSION}")
    return doc


def precheck(config: BenchConfig, policy: Any) -> None:
    """The usage errors run_bench would raise before judging (an unknown --only name, solutions that
    are neither a folder nor a run id, a --resume file of another policy), raised before a pool's
    workers start; the resume file's device too when the bench names one (with `auto` the pool
    decides it, and run_bench checks it)."""
    entries = select_entries(config.suite, config.only)
    find_solutions(config.sources, entries, config.store)
    _resumable(config, policy.to_dict(), None if config.device == "auto" else config.device)


def _resumable(config: BenchConfig, policy: dict[str, Any], device: Optional[str]) -> dict[str, dict[str, Any]]:
    """Finished rows of `out` that still match (problem hash, candidate files, policy, device; a
    None device is not checked)."""
    if not config.resume or config.out is None or not config.out.is_file():
        return {}
    old = load_bench(config.out)
    if old.get("policy") != policy:
        raise UsageError(f"{config.out} was judged under another policy; drop --resume or write elsewhere")
    if device is not None and old.get("device") != device:
        raise UsageError(f"{config.out} was judged on {old.get('device')}, this bench runs on {device}; drop --resume or write elsewhere")
    return {r["name"]: r for r in old["problems"] if r.get("verdict") and r["status"] != "infra_error"}


def _reusable(row: Optional[dict[str, Any]], entry: Entry, sol: Optional[Solution]) -> bool:
    return (row is not None and sol is not None and row.get("problem_hash") == entry.problem.hash
            and (row.get("solution") or {}).get("files") == sol.files)


def run_bench(config: BenchConfig, policy: Any, *, on_start: Callable[[int, int, str], None] = lambda i, n, name: None,
              say: Say = lambda m: None, warn: Say = lambda m: None) -> dict[str, Any]:
    """Judge every problem's candidate in suite order and return the bench document."""
    entries = select_entries(config.suite, config.only)
    n_suite = len(load_suite(config.suite)) if config.only else len(entries)
    solutions, warnings = find_solutions(config.sources, entries, config.store)
    for w in warnings:
        warn(w)
    # a pool's workers hold the device (a Ray cluster's, maybe none of this driver's)
    if config.pool is not None:
        try:
            config.pool.check(policy)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if config.pool is not None:
        from kernelwright.judge.evaluate import gpu_lock_enabled

        try:
            gpu_lock_enabled()  # a bad lock setting, which the workers inherit, is a usage error here, not every row's
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    device = config.pool.device if config.pool is not None else check_environment(config.device, policy)
    pdict = policy.to_dict()
    done = _resumable(config, pdict, device)
    if config.pool is not None:
        return _pooled(config, policy, entries, solutions, done, device, n_suite, on_start)
    rows: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        name, sol = entry.problem.name, solutions.get(entry.problem.name)
        on_start(i, len(entries), name)
        if _reusable(done.get(name), entry, sol):
            rows.append(done[name])
        elif sol is not None and sol.error:
            rows.append(problem_row(entry, sol, note=sol.error, status=INVALID))
        elif sol is None or not sol.files:
            rows.append(problem_row(entry, sol))
        else:
            rows.append(problem_row(entry, sol, *judge_solution(entry, sol, policy, config, say)))
        if config.out is not None:
            write_json(document(config, pdict, rows, device, [e.problem.name for e in entries[i + 1:]], n_suite), config.out)
    return document(config, pdict, rows, device, (), n_suite)
