"""An optimisation run from start to export: `start` a run, `resume` a paused one with an engineer's
hint or candidate, and the final choice, re-judged in a fresh evaluation on fresh secret seeds (and
under compute-sanitizer on a GPU) before it is exported: the number a search picked its winner by is
never the number reported.

Every step goes to the store as it happens (agent.runlog); the loop's state is saved after every
turn, so a run that crashed or was interrupted resumes where it stood.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelwright.agent import prompts, search
from kernelwright.agent.feedback import describe
from kernelwright.agent.loop import Context, Counters, Entry
from kernelwright.agent.objective import Objective
from kernelwright.agent.replay import make_backend
from kernelwright.core.runs import Message, Role, RunStatus, StepKind
from kernelwright.agent.runlog import RunLog
from kernelwright.agent.workspace import RESERVED, Workspace
from kernelwright.llm.backend import preflight

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
FINAL_TRIES = 3  # candidates re-judged at most, fastest first, until one passes again
FINISHED = (RunStatus.SUCCEEDED.value, RunStatus.FINISHED.value)  # runs a resume continues only when asked to (`again`)
SLIM_KEYS = ("status", "runtime_ms", "eager_ms", "compile_ms", "speedup_vs_eager", "speedup_vs_compile", "speedup_vs_best",
             "max_abs_error", "baseline_source")


class RunFailed(RuntimeError):
    """The run broke after it started (not the user's input): its row says failed, with the cause."""


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """What `kernelwright optimize` was asked."""

    problem_spec: str  # path, builtin:NAME or kernelbench:PATH:LEVEL:ID
    model: str  # PROVIDER:MODEL
    objective: Objective  # goal, rules and budgets
    base_url: str | None = None  # an OpenAI-compatible or Anthropic server
    device: str = "auto"  # auto, cuda or cpu
    out_dir: Path | None = None  # where the winner goes (default: beside the store, runs/RUN_ID)
    store: Path | None = None  # the SQLite store
    timeout_s: float = 600.0  # per model request
    note: str = ""  # provenance in words (e.g. which scripted server answered), kept with the export
    pool: Any = None  # a client.pool.Pool (--ray, --pool), or a function making one once the request checks out (start closes
    # that one): verdicts judged by its workers, on its device


@dataclass(frozen=True)
class RunResult:
    """How a run (or a resumed stretch of it) ended."""

    run_id: str  # run-xxxxxxxx
    status: RunStatus  # succeeded, finished, paused, ...
    summary: str  # why it stopped, in words
    final: dict[str, Any] | None  # the exported candidate's fresh verdict
    out_dir: Path | None  # the drop-in package, when one was exported


def start(req: RunRequest, progress: Progress | None = None) -> RunResult:
    """Create a run and drive it until it finishes or pauses. ValueError (ProblemError among them)
    for bad input before the run exists; RunFailed when it broke after."""
    from kernelwright.agent import exporting
    from kernelwright.judge.evaluate import resolve_device
    from kernelwright.problems.loader import load_problem

    problem = load_problem(req.problem_spec)
    device = resolve_device(req.device) if req.pool is None else None  # with a pool, the pool's
    if req.out_dir is not None:
        exporting.check_out_dir(req.out_dir)
    backend = make_backend(req.model, base_url=req.base_url, timeout_s=req.timeout_s, price=req.objective.cost)
    preflight(backend)  # a missing key or an unreachable server stops here: nothing measured, no run made
    made = req.pool() if callable(req.pool) else None  # only now: a pool's workers take seconds (Ray: more) to start
    try:
        return _start(req, problem, backend, made or req.pool, device, progress)
    finally:
        if made is not None:
            made.close()


def _start(req: RunRequest, problem: Any, backend: Any, pool: Any, device: str | None, progress: Progress | None) -> RunResult:
    from kernelwright.store.runs import new_run_id

    device = pool.device if pool is not None else device
    _one_kind(pool)
    run_id = new_run_id()
    runlog = RunLog(req.store, run_id, progress=progress)
    runlog.db().create_run(run_id, problem_hash=problem.hash, problem_name=problem.name, problem_spec=req.problem_spec,
                           model=backend.name, strategy=req.objective.strategy, objective=req.objective.to_dict())
    meta = {"note": req.note, "base_url": req.base_url, "device": device, "out_dir": str(req.out_dir) if req.out_dir else None}
    pooled = "" if pool is None else f", judged by a pool of {pool.size} worker(s) (baselines measured beside every candidate)"
    runlog.say(f"{run_id}: {problem.name} with {backend.name}, strategy {req.objective.strategy}, device {device}{pooled}")
    ctx = _context(problem, req.objective, backend, runlog, device, req.store, pool)
    _replay_check(ctx, problem)
    return _drive(ctx, {"meta": meta})


def resume(run_id: str, *, hint: str | None = None, candidate: Path | None = None, store: Path | None = None, model: str | None = None,
           base_url: str | None = None, changes: dict[str, Any] | None = None, progress: Progress | None = None,
           force: bool = False, out_dir: Path | None = None, again: bool = False, pool: Any = None) -> RunResult:
    """Continue a run where it stood, with an engineer's hint and/or candidate. A run still marked
    running is refused unless `force` (its process may still be driving it; one killed outright
    leaves that mark behind); a finished one unless `again`. An earlier export is never replaced
    unless `out_dir` names it: the stretch exports beside it. `pool` judges this stretch's verdicts
    (client.pool, or a function making one once the rest checks out, closed at the end); it must
    be on the device the run started on."""
    from kernelwright.problems.loader import load_problem

    if candidate is not None:
        from kernelwright.judge.snapshot import read_candidate

        reserved = sorted(set(read_candidate(candidate)) & set(RESERVED))  # ValueError for a missing or unreadable candidate
        if reserved:
            raise ValueError(f"the candidate holds {', '.join(reserved)}, names the exported package writes itself; rename or remove them")
    runlog = RunLog(store, run_id, progress=progress)
    run = runlog.db().get_run(run_id)
    runlog.run_id = run_id = run["id"]
    if run["status"] == RunStatus.RUNNING.value and not force:
        raise ValueError(f"{run_id} is marked running (since {run.get('updated_at')}): another process may be driving it; "
                         "if its process is gone (killed), resume with --force")
    if run["status"] in FINISHED and not again:
        raise ValueError(finished_refusal(run))
    problem = load_problem(run["problem_spec"])
    if problem.hash != run["problem_hash"]:
        raise ValueError(f"{run['problem_spec']} changed since {run_id} started (hash {problem.hash[:12]}, the run has "
                         f"{run['problem_hash'][:12]}); a run continues on the problem it started on")
    state = dict(run.get("state") or {})
    meta = dict(state.get("meta") or {})
    before = state.get("objective") or run["objective"]
    if (changes or {}).get("size") not in (None, before.get("size", "auto")):
        raise ValueError(f"{run_id} judges the problem at size {before.get('size', 'auto')!r}; its best candidates were timed at that "
                         f"size, so a resume cannot change it (start a new run with --size {changes['size']})")
    objective = Objective.from_dict({**before, **(changes or {})})
    backend = make_backend(model or state.get("model") or run["model"], base_url=base_url or meta.get("base_url"), price=objective.cost)
    preflight(backend)
    state["objective"], state["model"] = objective.to_dict(), backend.name  # what this stretch runs with; the next resume starts from it
    if base_url:
        meta["base_url"] = base_url
    meta["out_dir"] = _resume_out_dir(run, meta, out_dir, runlog)
    state["meta"] = meta
    made = pool() if callable(pool) else None  # only now: a pool's workers take seconds (Ray: more) to start
    try:
        return _resume(run, state, problem, objective, backend, runlog, store, made or pool, hint, candidate)
    finally:
        if made is not None:
            made.close()


def _resume(run: dict[str, Any], state: dict[str, Any], problem: Any, objective: Objective, backend: Any, runlog: RunLog,
            store: Path | None, pool: Any, hint: str | None, candidate: Path | None) -> RunResult:
    run_id, meta = run["id"], state["meta"]
    started_on = meta.get("device") or "cpu"
    if pool is not None and pool.device != started_on:
        raise ValueError(f"{run_id} started on {started_on} and the pool judges on {pool.device}: its candidates' times would not compare")
    _one_kind(pool)
    runlog.load_totals()
    runlog.carry_elapsed(float(state.get("elapsed_s") or 0.0))
    ctx = _context(problem, objective, backend, runlog, started_on, store, pool)
    _restore(ctx, state)
    ctx.counters.since_gain = ctx.counters.failures = ctx.counters.idle = 0  # an engineer stepped in: the stall counters start again
    _grant(objective, state)
    pooled = "" if pool is None else f", judged by a pool of {pool.size} worker(s)"
    runlog.say(f"resuming {run_id} ({run['status']}): {problem.name} with {backend.name}{pooled}")
    inject: list[Message] = []
    if hint:
        runlog.step(StepKind.HINT, {"text": hint})
        inject.append(Message(Role.USER, prompts.hint(hint)))
        state["hints"] = list(state.get("hints", [])) + [hint]
    return _drive(ctx, state, inject=inject, engineer=candidate)


def finished_refusal(run: dict[str, Any]) -> str:
    """Why `resume` will not continue a finished run by itself, and how to ask for it."""
    where = f"; its export is in {run['out_dir']}" if run.get("out_dir") else ""
    return (f"{run['id']} has finished ({run['status']}{where}). Resuming it searches again, re-judges and exports again; "
            f"to do that, `kernelwright resume {run['id']} --again` (with --hint or --candidate if you like). "
            "The earlier export and its review are kept: the new export goes beside it unless --out names a folder")


def _resume_out_dir(run: dict[str, Any], meta: dict[str, Any], out_dir: Path | None, runlog: RunLog) -> str | None:
    """Where this stretch exports: `out_dir` when given (checked), else beside the run's earlier
    export (never over it), else where the run was told at its start."""
    from kernelwright.agent import exporting

    if out_dir is not None:
        exporting.check_out_dir(out_dir)
        return str(out_dir)
    earlier = run.get("out_dir")
    if earlier and exporting.is_export(earlier):
        fresh = exporting.next_out_dir(Path(earlier))
        runlog.say(f"the earlier export in {earlier} is kept; this stretch exports to {fresh} (--out names another folder)")
        return str(fresh)
    return meta.get("out_dir")


def _grant(objective: Objective, state: dict[str, Any]) -> None:
    """A resumed tree gets at least one more round, a resumed best-of-n a fresh batch, under new slots."""
    state["resumes"] = int(state.get("resumes", 0)) + 1
    if objective.strategy == "refine":  # at least max_failures more requests, so a hint is always sent
        state["turn_limit"] = max(objective.max_turns, int((state.get("trajectory") or {}).get("turn", 0)) + objective.max_failures)
    elif objective.strategy == "tree":
        state["round_limit"] = max(objective.rounds, int(state.get("round", 0)) + 1)
    elif objective.strategy == "best-of-n":
        state["done"] = 0


def _one_kind(pool: Any) -> None:
    """ValueError for a pool of more than one kind of GPU: a run compares its candidates' times."""
    if pool is not None and len(pool.gpus()) > 1:
        raise ValueError(f"the pool's workers have different GPUs ({', '.join(pool.gpus())}): a run compares its candidates' times, "
                         "which compare on one kind of GPU only; use a pool of one kind (bench and rl rollout take mixed pools: "
                         "each of their ratios is from one GPU)")


def run_device(run_id: str, store: Path | None) -> str:
    """The device a run started on (KeyError for an unknown run)."""
    log = RunLog(store, run_id)
    try:
        run = log.db().get_run(run_id)
    finally:
        log.close()
    return (dict(run.get("state") or {}).get("meta") or {}).get("device") or "cpu"


def _context(problem: Any, objective: Objective, backend: Any, runlog: RunLog, device: str, store: Path | None, pool: Any = None) -> Context:
    """With a pool (client.pool), the branches' verdicts are judged as many at once as it has workers."""
    from kernelwright.agent.judging import Judge

    judge = Judge(problem, objective, device=device, store=store, progress=None, pool=pool)
    workroot = Path(tempfile.mkdtemp(prefix=f"kw-{runlog.run_id}-"))
    ctx = Context(problem=problem, objective=objective, backend=backend, judge=judge, runlog=runlog, device=judge.device,
                  workroot=workroot, replay=backend.name.startswith("replay:"))
    if pool is not None:
        ctx.gpu_lock = threading.BoundedSemaphore(pool.size)  # type: ignore[assignment] - one verdict per worker at a time
    return ctx


def _replay_check(ctx: Context, problem: Any) -> None:
    """A recording made for another problem still replays, with a warning in the run."""
    if not ctx.replay:
        return
    recorded = (ctx.backend.recording.get("problem") or {}).get("hash")
    if recorded and recorded != problem.hash:
        text = f"the recording was made on a problem with hash {recorded[:12]}, not {problem.hash[:12]}: its turns may not fit"
        ctx.runlog.step(StepKind.NOTE, {"warning": text})
        ctx.runlog.say("warning: " + text)


def _engineer(ctx: Context, candidate: Path, state: dict[str, Any]) -> Message:
    """Judge an engineer's candidate, count it, and tell the model about it."""
    ctx.runlog.say(f"judging the engineer's candidate {candidate}")
    judged = ctx.judge.full(Path(candidate))
    search.engineer_entry(ctx, judged)
    if state.get("trajectory"):
        state["trajectory"]["workspace"] = dict(judged.files)
    return Message(Role.USER, prompts.engineer_candidate(judged.files, describe(judged, target_speedup=ctx.objective.target_speedup)))


# -- driving ------------------------------------------------------------------------------------------


def _drive(ctx: Context, state: dict[str, Any], *, inject: list[Message] | None = None, engineer: Path | None = None) -> RunResult:
    """Run the strategy; pause, or re-judge and export. A crash marks the run failed, Ctrl-C interrupted."""
    runlog = ctx.runlog
    runlog.update(status=RunStatus.RUNNING)
    save = _saver(ctx, state)
    inject = list(inject or [])
    try:
        if ctx.objective.baselines != "skip" and ctx.judge.pool is None:  # a pool's workers measure them beside every candidate
            runlog.say("measuring the eager and torch.compile baselines")
            ctx.judge.ensure_baselines()
        if engineer is not None:
            inject.append(_engineer(ctx, engineer, state))
        ending = _strategy(ctx, state, save, inject)
        if ending.pause:
            return _pause(ctx, ending.reason)
        return _final(ctx, ending.reason, state)
    except KeyboardInterrupt:
        save({})
        runlog.update(status=RunStatus.INTERRUPTED, summary="interrupted (Ctrl-C); `kernelwright resume` continues it")
        raise
    except Exception as exc:
        save({})
        tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-1500:]
        runlog.update(status=RunStatus.FAILED, summary=f"the run broke: {type(exc).__name__}: {exc}\n{tail}")
        raise RunFailed(f"run {runlog.run_id} broke: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(ctx.workroot, ignore_errors=True)


def _strategy(ctx: Context, state: dict[str, Any], save: Callable[[dict[str, Any]], None], inject: list[Message]) -> search.Ending:
    strategy = ctx.objective.strategy
    if strategy == "refine":
        traj = search.restore_refine(ctx, state) if state.get("trajectory") else search.start_refine(ctx)
        for m in inject:
            traj.add(m)
        return search.refine(ctx, traj, save, turn_limit=int(state.get("turn_limit") or ctx.objective.max_turns))
    files_of = lambda h: ctx.runlog.db().get_candidate_files(h)  # noqa: E731
    if strategy == "tree":
        return search.tree(ctx, state, save, files_of)
    return search.best_of_n(ctx, state, save)


def _saver(ctx: Context, state: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A function that folds the strategy's progress into the run's saved state."""

    def save(extra: dict[str, Any]) -> None:
        state.update(extra)
        state.update({"counters": dataclasses.asdict(ctx.counters), "elapsed_s": ctx.runlog.elapsed_s,
                      "entries": [_slim(e) for e in ctx.entries], "best": _slim(ctx.best) if ctx.best else None})
        ctx.runlog.update(state=state, best=state["best"])

    return save


def _slim(entry: Entry) -> dict[str, Any]:
    d = entry.to_dict()
    d["verdict"] = {k: entry.verdict.get(k) for k in SLIM_KEYS}
    return d


def _restore(ctx: Context, state: dict[str, Any]) -> None:
    ctx.entries = [Entry.from_dict(e) for e in state.get("entries", [])]
    ctx.best = Entry.from_dict(state["best"]) if state.get("best") else None
    ctx.counters = Counters(**state.get("counters", {}))


def _pause(ctx: Context, reason: str) -> RunResult:
    best = ctx.best
    where = (f"best so far {best.runtime_ms:.4g} ms ({best.verdict.get('speedup_vs_best') or 0:.3f}x the faster baseline, {best.key})"
             if best else "no verified candidate yet")
    summary = (f"paused: {reason}; {where}. Continue with `kernelwright resume {ctx.runlog.run_id} --hint TEXT` "
               f"or `--candidate DIR`; `kernelwright runs show {ctx.runlog.run_id}` has the evidence.")
    ctx.runlog.step(StepKind.PAUSE, {"reason": reason, "summary": summary})
    ctx.runlog.update(status=RunStatus.PAUSED, summary=summary)
    ctx.runlog.say(summary)
    return RunResult(ctx.runlog.run_id, RunStatus.PAUSED, summary, None, None)


def _final_refusal(verdict: dict[str, Any]) -> str:
    """Why a final re-judge does not pass: not correct, or any compute-sanitizer tool found errors."""
    if verdict.get("status") != "correct":
        return str(verdict.get("status"))
    found = [f"{t.get('tool')} {t['errors']}" for t in (verdict.get("sanitizer") or {}).get("tools") or [] if (t.get("errors") or 0) > 0]
    return f"compute-sanitizer reported error(s): {', '.join(found)}" if found else ""


def sanitizer_gap(verdict: dict[str, Any]) -> str:
    """What the sanitizer did not establish for a verdict it was asked for ("" when complete or not asked)."""
    san = verdict.get("sanitizer")
    if not san:
        return ""
    if not san.get("ran"):
        return f"compute-sanitizer did not run: {san.get('reason') or 'no reason given'}"
    gaps = [str(t.get("tool")) for t in san.get("tools") or [] if t.get("errors") is None or not t.get("forward_completed")]
    return f"compute-sanitizer gave no complete count for {', '.join(gaps)}" if gaps else ""


def _final(ctx: Context, reason: str, state: dict[str, Any]) -> RunResult:
    """Re-judge the fastest candidates afresh until one passes again; export it."""
    from kernelwright.agent import exporting

    runlog = ctx.runlog
    ranked: list[Entry] = []
    for e in sorted((e for e in ctx.entries if e.correct), key=lambda e: e.runtime_ms):
        if e.candidate_hash not in {r.candidate_hash for r in ranked}:
            ranked.append(e)
    for entry in ranked[:FINAL_TRIES]:
        try:
            files = runlog.db().get_candidate_files(entry.candidate_hash)
        except KeyError:
            runlog.say(f"{entry.key}: its files are not in the store; trying the next")
            continue
        ws = Workspace(ctx.workroot / "final")
        ws.root.mkdir(parents=True, exist_ok=True)
        ws.load(files)
        runlog.say(f"re-judging {entry.key} ({entry.candidate_hash[:12]}) in a fresh evaluation on fresh seeds")
        judged = ctx.judge.final(ws.root)
        verdict = judged.verdict.to_dict()
        runlog.step(StepKind.FINAL, {"candidate_hash": entry.candidate_hash, "verdict_id": judged.verdict_id, "verdict": verdict,
                                     "search_verdict": {k: entry.verdict.get(k) for k in SLIM_KEYS}, "key": entry.key})
        why = _final_refusal(verdict)
        if not why:
            gap = sanitizer_gap(verdict)
            if gap:
                runlog.step(StepKind.NOTE, {"sanitizer": gap, "key": entry.key})
                runlog.say(f"warning: {gap}")
            return exporting.finish(ctx, reason + (f"; {gap}" if gap else ""), entry, judged, files, state)
        runlog.say(f"{entry.key} did not pass again ({why}); trying the next")
    summary = f"finished: {reason}; " + ("no candidate passed the fresh re-judge" if ranked else "no verified candidate")
    runlog.update(status=RunStatus.FINISHED, summary=summary)
    runlog.say(summary)
    return RunResult(runlog.run_id, RunStatus.FINISHED, summary, None, None)
