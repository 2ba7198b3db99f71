"""A run's history for people: rich tables for the terminal, a JSON form for --json, and the plain
evidence text an engineer reads before approving a run.

Everything here takes the dicts the store returns (`Store.get_run`, `Store.list_runs`,
`Store.run_steps`) and tolerates missing keys: a run cut short has gaps, and they print as "-".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelwright.core.runs import StepKind
from kernelwright.agent.transcript import CLIP, transcript
from kernelwright.store.runs import json_ready

JUDGED_KINDS = (StepKind.CANDIDATE.value, StepKind.ENGINEER_CANDIDATE.value)
STATUS_STYLE = {"running": "cyan", "paused": "yellow", "succeeded": "green", "finished": "blue", "failed": "red",
                "interrupted": "magenta"}
VERDICT_STYLE = {"correct": "green", "rejected": "magenta", "infra_error": "yellow"}
_OBJECTIVE_KEYS = ("target_speedup", "strategy", "rounds", "branches", "ideas", "max_turns", "budget_tokens",
                   "budget_minutes", "stuck_after", "max_failures", "precision", "libraries", "baselines")


# -- formatting -------------------------------------------------------------------------------


def _finite(value: Any) -> bool:
    """Whether value is a real, finite number (not a bool, not NaN or infinite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt_ms(value: Any) -> str:
    """A time in ms, or "-"."""
    return f"{value:.4g} ms" if _finite(value) else "-"


def fmt_x(value: Any) -> str:
    """A speedup, or "-"."""
    return f"{value:.3f}x" if _finite(value) else "-"


def fmt_cost(value: Any) -> str:
    """USD, or "-" when unknown."""
    return f"${value:.4f}" if _finite(value) else "-"


def fmt_num(value: Any) -> str:
    """A number to three significant digits, or "-"."""
    return format(value, ".3g") if _finite(value) else "-"


def fmt_tokens(totals: dict[str, Any] | None) -> str:
    """Prompt + completion tokens as one number."""
    totals = totals or {}
    return str(int(totals.get("prompt_tokens") or 0) + int(totals.get("completion_tokens") or 0))


def review_text(approved: bool | None, note: str | None) -> str:
    """`not reviewed`, or `approved` / `rejected`, with the note (on one line) after a dash."""
    if approved is None:
        return "not reviewed"
    word = "approved" if approved else "rejected"
    flat = " ".join(str(note or "").split())
    return f"{word} — {flat}" if flat else word


def _short(value: Any, n: int = 12) -> str:
    return str(value)[:n] if value else "-"


# -- reading steps ----------------------------------------------------------------------------


def _payload(step: dict[str, Any]) -> dict[str, Any]:
    payload = step.get("payload")
    return payload if isinstance(payload, dict) else {}


def _verdict(payload: dict[str, Any]) -> dict[str, Any]:
    verdict = payload.get("verdict")
    return verdict if isinstance(verdict, dict) else {}


def _of_kind(steps: Iterable[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [s for s in steps if s.get("kind") in kinds]


def candidate_rows(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per judged candidate (candidate and engineer_candidate steps), in seq order."""
    rows = []
    for step in _of_kind(steps, *JUDGED_KINDS):
        payload, verdict = _payload(step), _verdict(_payload(step))
        rows.append({
            "seq": step.get("seq"), "branch": step.get("branch") or "", "kind": step.get("kind"),
            "source": payload.get("source") or ("engineer" if step.get("kind") == StepKind.ENGINEER_CANDIDATE.value else ""),
            "status": verdict.get("status"), "candidate_hash": payload.get("candidate_hash"),
            "verdict_id": payload.get("verdict_id"), "runtime_ms": verdict.get("runtime_ms"),
            "eager_ms": verdict.get("eager_ms"), "compile_ms": verdict.get("compile_ms"),
            "speedup_vs_eager": verdict.get("speedup_vs_eager"), "speedup_vs_compile": verdict.get("speedup_vs_compile"),
            "speedup_vs_best": verdict.get("speedup_vs_best"),
        })
    return rows


def final_verdict(steps: Sequence[dict[str, Any]]) -> tuple[str | None, dict[str, Any] | None]:
    """(candidate hash, verdict) of the last final re-judge, or (None, None) when none ran."""
    finals = _of_kind(steps, StepKind.FINAL.value)
    if not finals:
        return None, None
    payload = _payload(finals[-1])
    return payload.get("candidate_hash"), _verdict(payload) or None


def best_verdict(run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the judged step the run's best came from, its verdict), matched by verdict id, else candidate hash."""
    best = run.get("best") or {}
    if not best:
        return None, None
    judged = _of_kind(steps, *JUDGED_KINDS)
    for key in ("verdict_id", "candidate_hash"):
        wanted = best.get(key)
        for step in reversed(judged):
            if wanted and _payload(step).get(key) == wanted and _verdict(_payload(step)):
                return step, _verdict(_payload(step))
    embedded = best.get("verdict")
    return None, embedded if isinstance(embedded, dict) else None


def best_figure(best: dict[str, Any] | None, key: str) -> Any:
    """A figure of the run's best (runtime_ms, speedup_vs_best...): the best's own field, else its verdict's."""
    best = best or {}
    verdict = best.get("verdict") if isinstance(best.get("verdict"), dict) else {}
    return best[key] if best.get(key) is not None else verdict.get(key)


def exported(steps: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's latest export: {out_dir, candidate_hash, verdict_id, verdict}, the verdict being the
    final re-judge it passed; None when the run exported nothing."""
    exports = _of_kind(steps, StepKind.EXPORT.value)
    if not exports:
        return None
    export = _payload(exports[-1])
    finals = [_payload(s) for s in _of_kind(steps, StepKind.FINAL.value) if _payload(s).get("candidate_hash") == export.get("candidate_hash")]
    verdict = _verdict(finals[-1]) if finals else {}
    return {"out_dir": export.get("out_dir"), "candidate_hash": export.get("candidate_hash"), "verdict_id": export.get("verdict_id"),
            "verdict": verdict or None}


def speedup_cell(run: dict[str, Any]) -> str:
    """The run's speedup over the faster baseline: the exported candidate's re-judged figure when
    the run exported one (run["export"], see `exported`), else the search's best."""
    export = run.get("export") or {}
    if export:
        return f"{fmt_x((export.get('verdict') or {}).get('speedup_vs_best'))} re-judged"
    value = best_figure(run.get("best"), "speedup_vs_best")
    return f"{fmt_x(value)} search" if _finite(value) else "-"


def fired_guards(verdict: dict[str, Any] | None) -> list[str]:
    """`name: detail` for each guard of a verdict that fired."""
    guards = (verdict or {}).get("guards") or []
    return [f"{g.get('name')}: {g.get('detail') or ''}".rstrip(": ") for g in guards if isinstance(g, dict) and g.get("fired")]


def steps_not_run(verdict: dict[str, Any] | None) -> list[str]:
    """`name, name: reason` lines for the protocol steps of a verdict that did not run, grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for step in (verdict or {}).get("steps") or []:
        if isinstance(step, dict) and not step.get("ran", True):
            by_reason.setdefault(str(step.get("reason") or "no reason given"), []).append(str(step.get("name")))
    return [f"{', '.join(names)}: {reason}" for reason, names in by_reason.items()]


def verdict_line(verdict: dict[str, Any] | None) -> str:
    """Status, times, speedups and errors of a verdict on one line."""
    if not verdict:
        return "no verdict"
    v = verdict
    return (f"{v.get('status') or '-'}; candidate {fmt_ms(v.get('runtime_ms'))}, eager {fmt_ms(v.get('eager_ms'))}, "
            f"torch.compile {fmt_ms(v.get('compile_ms'))}; speedup vs eager {fmt_x(v.get('speedup_vs_eager'))}, "
            f"vs compile {fmt_x(v.get('speedup_vs_compile'))}, vs best {fmt_x(v.get('speedup_vs_best'))}; "
            f"max abs error {fmt_num(v.get('max_abs_error'))}, max rel error {fmt_num(v.get('max_rel_error'))}")


def objective_line(objective: dict[str, Any] | None) -> str:
    """The objective's main settings as `key=value` pairs (unset ones left out)."""
    objective = objective or {}
    pairs = [(k, objective.get(k)) for k in _OBJECTIVE_KEYS]
    return ", ".join(f"{k}={v}" for k, v in pairs if v not in (None, "", [], ())) or "-"


def totals_line(totals: dict[str, Any] | None, model: str | None = None) -> str:
    """Steps, tokens and cost on one line (a replay's tokens are the recording's, and cost nothing now)."""
    t = totals or {}
    replayed = " (recorded by the replayed run; a replay spends nothing)" if str(model or "").startswith("replay:") else ""
    return (f"{t.get('steps', 0)} steps, {t.get('prompt_tokens', 0)} prompt + {t.get('completion_tokens', 0)} "
            f"completion tokens, cost {fmt_cost(t.get('cost_usd'))}{replayed}")


# -- the terminal -----------------------------------------------------------------------------


def print_runs(console: Console, runs: Sequence[dict[str, Any]]) -> None:
    """One row per run: id, status, problem, model, strategy, speedup, tokens, cost, review, updated."""
    table = Table(title="runs", caption="vs best: speedup over the faster of eager and torch.compile; \"re-judged\": the exported "
                                        "candidate's final re-judge on fresh seeds, \"search\": the search's best (nothing exported)")
    for column in ("id", "status", "problem", "model", "strategy", "vs best", "tokens", "cost", "approved", "updated"):
        table.add_column(column)
    for run in runs:
        status = str(run.get("status") or "-")
        table.add_row(
            escape(str(run.get("id") or "-")), f"[{STATUS_STYLE.get(status, 'white')}]{escape(status)}[/]",
            escape(str(run.get("problem_name") or "-")), escape(str(run.get("model") or "-")),
            escape(str(run.get("strategy") or "-")), speedup_cell(run), fmt_tokens(run.get("totals")),
            fmt_cost((run.get("totals") or {}).get("cost_usd")), _approved_cell(run.get("approved")),
            escape(str(run.get("updated_at") or "-")[:19]),
        )
    console.print(table)


def _approved_cell(approved: bool | None) -> str:
    return "-" if approved is None else ("[green]yes[/]" if approved else "[red]no[/]")


def print_run(console: Console, run: dict[str, Any], steps: Sequence[dict[str, Any]], *, limit: int | None = CLIP) -> None:
    """Header, objective, the conversation (texts clipped to `limit`), best candidate, judged
    candidates, final re-judge and export, pauses, hints, reviews, totals."""
    _print_header(console, run)
    conversation = transcript(steps, limit=limit)
    if conversation:
        console.print(conversation, highlight=False, markup=False)
    _print_best(console, run, steps)
    rows = candidate_rows(steps)
    if rows:
        console.print(_candidate_table(rows))
    else:
        console.print("no candidates judged yet", style="dim")
    final_hash, final = final_verdict(steps)
    if final is not None:
        console.print(f"final re-judge ({_short(final_hash)}): {verdict_line(final)}", highlight=False, markup=False)
    export = exported(steps)
    if export:
        v = export.get("verdict") or {}
        console.print(f"exported: {_short(export.get('candidate_hash'))}, re-judged on fresh seeds {fmt_ms(v.get('runtime_ms'))}, "
                      f"{fmt_x(v.get('speedup_vs_best'))} vs the faster baseline, in {export.get('out_dir') or '-'}", highlight=False, markup=False)
    _print_notes(console, run, steps)
    console.print(f"totals: {totals_line(run.get('totals'), run.get('model'))}", highlight=False, markup=False)


def _print_header(console: Console, run: dict[str, Any]) -> None:
    status = str(run.get("status") or "-")
    console.print(
        f"[bold]{escape(str(run.get('id') or '-'))}[/]  [{STATUS_STYLE.get(status, 'white')}]{escape(status)}[/]  "
        f"{escape(str(run.get('problem_name') or '-'))} ({escape(_short(run.get('problem_hash')))})  "
        f"model {escape(str(run.get('model') or '-'))}  strategy {escape(str(run.get('strategy') or '-'))}",
        highlight=False,
    )
    lines = [f"problem: {run.get('problem_spec') or '-'}", f"objective: {objective_line(run.get('objective'))}",
             f"created {run.get('created_at') or '-'}, updated {run.get('updated_at') or '-'}"]
    if run.get("out_dir"):
        lines.append(f"exported to: {run['out_dir']}")
    console.print("\n".join(lines), highlight=False, markup=False)


def _print_best(console: Console, run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> None:
    best = run.get("best") or {}
    if not best:
        console.print("best in the search: none yet", highlight=False, markup=False)
        return
    step, verdict = best_verdict(run, steps)
    where = f" (step {step.get('seq')}, branch {step.get('branch') or '-'})" if step else ""
    console.print(
        f"best in the search: {_short(best.get('candidate_hash'))}{where}, {fmt_ms(best_figure(best, 'runtime_ms'))}, "
        f"{fmt_x(best_figure(best, 'speedup_vs_best'))} vs the faster baseline", highlight=False, markup=False)
    if verdict:
        console.print(f"  {verdict_line(verdict)}", highlight=False, markup=False)


def _candidate_table(rows: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="judged candidates")
    for column in ("seq", "branch", "source", "status", "candidate", "runtime", "vs eager", "vs compile", "vs best"):
        table.add_column(column)
    for r in rows:
        status = str(r.get("status") or "-")
        table.add_row(
            str(r.get("seq")), escape(r.get("branch") or "-"), escape(r.get("source") or "-"),
            f"[{VERDICT_STYLE.get(status, 'red')}]{escape(status)}[/]", escape(_short(r.get("candidate_hash"))),
            fmt_ms(r.get("runtime_ms")), fmt_x(r.get("speedup_vs_eager")), fmt_x(r.get("speedup_vs_compile")),
            fmt_x(r.get("speedup_vs_best")),
        )
    return table


def _print_notes(console: Console, run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> None:
    """Pause summaries, hints and reviews, in order; the run's own summary last."""
    labels = {StepKind.PAUSE.value: "paused", StepKind.HINT.value: "hint", StepKind.REVIEW.value: "review"}
    for step in _of_kind(steps, *labels):
        payload = _payload(step)
        if step["kind"] == StepKind.REVIEW.value:
            text = review_text(bool(payload.get("approved")), payload.get("note"))
        else:
            text = str(payload.get("summary") or payload.get("text") or "")
        console.print(f"{labels[step['kind']]} (step {step.get('seq')}): {text}", highlight=False, markup=False)
    if run.get("summary"):
        console.print(f"summary: {run['summary']}", highlight=False, markup=False)
    console.print(f"review: {review_text(run.get('approved'), run.get('review_note'))}", highlight=False, markup=False)


# -- JSON and evidence ------------------------------------------------------------------------


def run_json(run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run, its judged candidates, its final re-judge and every step, ready for strict JSON."""
    final_hash, final = final_verdict(steps)
    return json_ready({
        "run": dict(run), "candidates": candidate_rows(steps),
        "final": None if final is None else {"candidate_hash": final_hash, "verdict": final},
        "steps": list(steps),
    })


def evidence(run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> str:
    """What an engineer reads before approving: the best verdict, guards, steps not run, the final re-judge."""
    lines = [
        f"Run {run.get('id') or '-'}: problem {run.get('problem_name') or '-'} ({_short(run.get('problem_hash'))}), "
        f"model {run.get('model') or '-'}, strategy {run.get('strategy') or '-'}, status {run.get('status') or '-'}",
        f"Objective: {objective_line(run.get('objective'))}",
    ]
    lines += _best_evidence(run, steps)
    lines += _final_evidence(run, steps)
    lines += _search_evidence(steps)
    if run.get("summary"):
        lines.append(f"Summary: {run['summary']}")
    lines.append(f"Totals: {totals_line(run.get('totals'), run.get('model'))}")
    lines.append(f"Review: {review_text(run.get('approved'), run.get('review_note'))}")
    return "\n".join(lines)


def _best_evidence(run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> list[str]:
    best = run.get("best") or {}
    if not best:
        return ["Best candidate: none (no candidate was correct)"]
    step, verdict = best_verdict(run, steps)
    where = f", step {step.get('seq')}, branch {step.get('branch') or '-'}" if step else ""
    lines = [f"Best candidate: {best.get('candidate_hash') or '-'} (verdict {best.get('verdict_id') or '-'}{where})",
             f"  search verdict: {verdict_line(verdict)}"]
    lines += _guard_and_step_lines(verdict)
    return lines


def _final_evidence(run: dict[str, Any], steps: Sequence[dict[str, Any]]) -> list[str]:
    final_hash, final = final_verdict(steps)
    if final is None:
        return ["Final re-judge: not run"]
    best_hash = (run.get("best") or {}).get("candidate_hash")
    same = "" if not best_hash else (" (the best candidate)" if best_hash == final_hash else " (NOT the best candidate)")
    lines = [f"Final re-judge on fresh seeds: {final_hash or '-'}{same}", f"  {verdict_line(final)}"]
    return lines + _guard_and_step_lines(final)


def _guard_and_step_lines(verdict: dict[str, Any] | None) -> list[str]:
    if not verdict:
        return []
    guards = fired_guards(verdict)
    lines = [f"  guards that fired: {'; '.join(guards) if guards else 'none'}"]
    skipped = steps_not_run(verdict) or ["none"]
    lines.append(f"  steps not run: {skipped[0]}")
    lines += [f"    {s}" for s in skipped[1:]]
    return lines


def _search_evidence(steps: Sequence[dict[str, Any]]) -> list[str]:
    """Counts of judged candidates by status, and the guards that refused candidates during the search."""
    rows = candidate_rows(steps)
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r.get("status") or "no verdict")] = counts.get(str(r.get("status") or "no verdict"), 0) + 1
    guard_counts: dict[str, int] = {}
    for step in _of_kind(steps, *JUDGED_KINDS):
        for guard in fired_guards(_verdict(_payload(step))):
            name = guard.split(":")[0]
            guard_counts[name] = guard_counts.get(name, 0) + 1
    lines = [f"Search: {len(rows)} candidates judged" + (f" ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})" if rows else "")]
    if guard_counts:
        lines.append("  guards fired during the search: " + ", ".join(f"{k} x{v}" for k, v in sorted(guard_counts.items())))
    return lines
