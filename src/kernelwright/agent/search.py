"""Search strategies over trajectories.

- `refine`: one multi-turn conversation; the model writes, the judge rules, the verdict goes back,
  until the target is met, a budget is spent, or the run is stuck.
- `tree`: rounds of optimisation ideas in words, each implemented by several branches at once
  starting from the bank's best; the bank of the best verified candidates seeds the next round.
- `best-of-n`: independent attempts at once; the fastest verified one wins.

Branches ask the model in parallel threads; each branch's candidate is built at once on the CPU
(the build cache) while the device judges one candidate at a time (Context.gpu_lock).
Every strategy returns an `Ending`: finish (go on to the final re-judge) or pause (an engineer's turn).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from kernelwright.agent import prompts
from kernelwright.agent.extract import extract_ideas
from kernelwright.agent.loop import Context, Entry, Outcome, Trajectory
from kernelwright.core.runs import LLMError, Message, Role, StepKind

BRANCH_TURNS = 2  # tree and best-of-n: requests per branch (the attempt and one repair), at most max_turns
BANK_SIZE = 4  # tree: verified candidates kept to seed the next round
IDLE_FACTOR = 3  # refine pauses after max_failures x this many tool turns in a row that judged nothing


@dataclass(frozen=True)
class Ending:
    """How a strategy stopped."""

    pause: bool  # True: wait for an engineer (stuck, or the model failed); False: finish the run
    reason: str  # in words, for the run's summary


def stuck_reason(ctx: Context, unit: str) -> str | None:
    """Why the run is stuck, or None."""
    o, c = ctx.objective, ctx.counters
    if c.failures >= o.max_failures:
        return f"stuck: {c.failures} failed turns in a row"
    if c.since_gain >= o.stuck_after:
        return f"stuck: no gain over the best in {c.since_gain} {unit}"
    if c.idle >= IDLE_FACTOR * o.max_failures:
        return f"stuck: {c.idle} tool turns in a row without judging a candidate"
    return None


def resume_prefix(state: dict[str, Any]) -> str:
    """Slot prefix of the tree's and best-of-n's requests after the k-th resume ("xk/"), so that a
    resumed round's slots never repeat an earlier one's (replays look turns up by slot)."""
    k = int(state.get("resumes", 0))
    return f"x{k}/" if k else ""


def llm_ending(ctx: Context, exc: LLMError) -> Ending:
    """A replay that ran out of turns finishes; any other model failure pauses the run."""
    if exc.kind == "exhausted" and ctx.replay:
        return Ending(False, "the recording has no more model turns")
    return Ending(True, f"the model failed after retries ({exc.kind}): {str(exc)[:300]}")


# -- refine ---------------------------------------------------------------------------------------


def start_refine(ctx: Context) -> Trajectory:
    first = prompts.problem_prompt(ctx.problem, ctx.device, tools=ctx.use_tools(), target=ctx.objective.target_speedup)
    return Trajectory(ctx, "", [ctx.system_message(), Message(Role.USER, first)], tools=True)


def restore_refine(ctx: Context, state: dict[str, Any]) -> Trajectory:
    t = state["trajectory"]
    traj = Trajectory(ctx, t["branch"], [Message.from_dict(m) for m in t["messages"]], tools=True, turn=t["turn"], sent=t["sent"])
    if t.get("workspace"):
        traj.workspace.load(t["workspace"])
    return traj


def refine(ctx: Context, traj: Trajectory, save: Callable[[dict[str, Any]], None], *, turn_limit: int | None = None) -> Ending:
    """One conversation until the target, a budget, the turn limit or a stall."""
    limit = turn_limit or ctx.objective.max_turns
    traj.allow_done = True
    while True:
        reason = ctx.stop_reason() or (f"turn limit reached ({traj.turn} requests)" if traj.turn >= limit else None)
        if reason:
            return Ending(False, reason)
        try:
            key, reply = traj.request()
        except LLMError as exc:
            save({"trajectory": traj.state()})
            return llm_ending(ctx, exc)
        out = traj.handle(key, reply)
        ctx.counters.failures = ctx.counters.failures + 1 if out.failed else 0
        save({"trajectory": traj.state()})
        if ctx.target_met():
            return Ending(False, f"target met: {ctx.best.verdict.get('speedup_vs_best'):.3f}x the faster baseline")  # type: ignore[union-attr]
        if out.done:
            return Ending(False, "the model said it is done")
        if out.submitted:
            return Ending(False, "the model submitted its candidate")
        stuck = stuck_reason(ctx, "judged candidates")
        if stuck:
            return Ending(True, stuck)


# -- branches (tree and best-of-n) ----------------------------------------------------------------


def run_branch(ctx: Context, branch: str, prompt: str, idea: str = "") -> tuple[Outcome, str]:
    """A short conversation: the attempt and up to BRANCH_TURNS - 1 repairs. Returns its best
    outcome and a one-line account of it for the next round's idea prompt."""
    traj = Trajectory(ctx, branch, [ctx.system_message(), Message(Role.USER, prompt)], tools=False)
    last = "no candidate"
    for _ in range(min(BRANCH_TURNS, ctx.objective.max_turns)):
        if ctx.stop_reason():
            break
        try:
            key, reply = traj.request()
        except LLMError as exc:
            return Outcome(failed=True), f"the model failed ({exc.kind})"
        out = traj.handle(key, reply)
        for e in out.entries:
            e.idea = idea
        last = _account(out, traj.last_status)
        if not out.failed:
            return out, last
    return Outcome(failed=True), last


def _account(out: Outcome, last_status: str) -> str:
    """One line on a branch's turn, from its own outcome (other branches run at the same time)."""
    if out.entries:
        v = out.entries[0].verdict
        s = v.get("speedup_vs_best")
        return f"correct, {v.get('runtime_ms'):.4g} ms" + (f", {s:.3f}x the faster baseline" if s else "")
    return f"failed ({last_status or 'no candidate'})"


def bank(ctx: Context, files_of: Callable[[str], dict[str, str]]) -> list[dict[str, Any]]:
    """The best distinct verified candidates so far, fastest first, with their files."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for e in sorted((e for e in ctx.entries if e.correct), key=lambda e: e.runtime_ms):
        if e.candidate_hash not in seen:
            seen.add(e.candidate_hash)
            out.append({"candidate_hash": e.candidate_hash, "verdict": e.verdict, "idea": e.idea, "files": files_of(e.candidate_hash)})
        if len(out) == BANK_SIZE:
            break
    return out


def _parallel(ctx: Context, jobs: list[Callable[[], tuple[Outcome, str]]]) -> list[tuple[Outcome, str]]:
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), ctx.objective.parallel_builds))) as pool:
        futures = [pool.submit(job) for job in jobs]
        return [f.result() for f in futures]


def tree(ctx: Context, state: dict[str, Any], save: Callable[[dict[str, Any]], None], files_of: Callable[[str], dict[str, str]]) -> Ending:
    """Rounds of ideas, K branches per idea, the bank's best seeding the next round."""
    o = ctx.objective
    tried: list[dict[str, Any]] = list(state.get("tried", []))
    hints: list[str] = list(state.get("hints", []))
    prefix = resume_prefix(state)
    for r in range(int(state.get("round", 0)), int(state.get("round_limit", o.rounds))):
        reason = ctx.stop_reason()
        if reason:
            return Ending(False, reason)
        best_before = ctx.best.runtime_ms if ctx.best else None
        rounds_without_gain = ctx.counters.since_gain  # the tree counts rounds, not candidates
        seeds = bank(ctx, files_of)
        ideas_text = prompts.ideas_prompt(ctx.problem, ctx.device, seeds, tried, o.ideas) + "".join("\n\n" + prompts.hint(h) for h in hints)
        traj = Trajectory(ctx, f"{prefix}r{r}/ideas/", [ctx.system_message(), Message(Role.USER, ideas_text)], tools=False)
        try:
            _, reply = traj.request()
        except LLMError as exc:
            return llm_ending(ctx, exc)
        ideas = extract_ideas(reply.text, o.ideas) or [reply.text.strip()[:500] or "a faster kernel"]
        ctx.runlog.step(StepKind.IDEAS, {"round": r, "ideas": ideas}, branch=f"r{r}")
        base = seeds[0] if seeds else None
        jobs = [(i, b) for i in range(len(ideas)) for b in range(o.branches)]
        results = _parallel(ctx, [lambda i=i, b=b: run_branch(ctx, f"{prefix}r{r}/i{i}/b{b}/", prompts.implement_prompt(ctx.problem, ctx.device, ideas[i], base), ideas[i])
                                  for i, b in jobs])
        tried += [{"idea": ideas[i], "outcome": account} for (i, _), (_, account) in zip(jobs, results)]
        gained = ctx.best is not None and (best_before is None or ctx.best.runtime_ms < best_before)
        ctx.counters.since_gain = 0 if gained else rounds_without_gain + 1
        ctx.counters.failures = 0 if any(not out.failed for out, _ in results) else ctx.counters.failures + 1
        ctx.runlog.step(StepKind.BANK, {"round": r, "bank": [{k: v for k, v in e.items() if k != "files"} for e in bank(ctx, files_of)]}, branch=f"r{r}")
        save({"round": r + 1, "tried": tried, "hints": hints})
        if ctx.target_met():
            return Ending(False, f"target met in round {r}")
        stuck = stuck_reason(ctx, "rounds")
        if stuck:
            return Ending(True, stuck)
    return Ending(False, f"all {o.rounds} rounds done")


def best_of_n(ctx: Context, state: dict[str, Any], save: Callable[[dict[str, Any]], None]) -> Ending:
    """`branches` independent attempts at once; the fastest verified one wins."""
    n = ctx.objective.branches
    start = int(state.get("done", 0))
    prompt = prompts.sample_prompt(ctx.problem, ctx.device, ctx.objective.target_speedup)
    hints = "".join("\n\n" + prompts.hint(h) for h in state.get("hints", []))
    prefix = resume_prefix(state)
    results = _parallel(ctx, [lambda b=b: run_branch(ctx, f"{prefix}n{b}/", prompt + hints) for b in range(start, n)])
    save({"done": n})
    if not any(not out.failed for out, _ in results) and not ctx.best:
        return Ending(True, f"none of the {n} attempts produced a verified candidate")
    return Ending(False, f"{n} attempts judged")


def engineer_entry(ctx: Context, judged: Any) -> Entry:
    """Count an engineer's candidate like any other."""
    verdict = judged.verdict.to_dict()
    entry = Entry(key="engineer", candidate_hash=judged.candidate_hash, verdict=verdict, verdict_id=judged.verdict_id, source="engineer")
    best = ctx.record(entry)
    ctx.runlog.step(StepKind.ENGINEER_CANDIDATE, {"candidate_hash": judged.candidate_hash, "verdict_id": judged.verdict_id,
                                                  "verdict": verdict, "source": "engineer", "new_best": best})
    return entry
