"""The compact report of one check: a header, the build, the verdict as the agent's tools describe it
(agent.feedback), ncu and the reference's breakdown when measured, the best check so far, and the
exit code in words. Plain text, short enough for a coding agent to read whole."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernelwright.agent import feedback
from kernelwright.agent.judging import BuildReport, Judged
from kernelwright.agent.optimize import sanitizer_gap
from kernelwright.agent.profile import breakdown_table, ncu_table
from kernelwright.judge import sandbox_check
from kernelwright.workspace.exits import EXIT_CODES, Exit, for_verdict, sanitizer_errors

if TYPE_CHECKING:
    from kernelwright.workspace.session import Session

LIMIT = 6000  # characters of the verdict's description


def exit_code(judged: Judged, *, final: bool) -> Exit:
    """The check's exit code: by status; on a final judgement, sanitizer errors too."""
    return for_verdict(judged.verdict.to_dict(), sanitized=final)


def compose(session: "Session", *, kind: str, digest: str | None, build: BuildReport, judged: Judged | None,
            extra: dict[str, Any]) -> str:
    """The report's text."""
    lines = [_header(session, kind, digest), "", feedback.describe_build(build, limit=LIMIT)]
    if judged is not None:
        lines += ["", feedback.describe(judged, target_speedup=session.objective.target_speedup, limit=LIMIT)]
        lines += _sanitizer(judged)
        unconfined = sandbox_check.plainly(judged.verdict.sandbox)
        lines += ["", unconfined] if unconfined else []
    if "ncu" in extra:
        lines += ["", ncu_table(extra["ncu"])]
    if "breakdown" in extra:
        lines += ["", breakdown_table(extra["breakdown"])]
    best = _best_line(session)
    if best:
        lines += ["", best]
    code = exit_code(judged, final=judged.mode == "final") if judged is not None else Exit.COMPILE_ERROR
    lines += ["", f"exit {int(code)}: {EXIT_CODES[int(code)]}"]
    return "\n".join(lines)


def _header(session: "Session", kind: str, digest: str | None) -> str:
    cand = f"candidate {digest[:12]}" if digest else "no candidate"
    return (f"kernelwright {kind} · {session.config.problem_name} · {session.device} · {session.config.id} · "
            f"policy {session.policy_digest()} · {cand}")


def _sanitizer(judged: Judged) -> list[str]:
    verdict = judged.verdict.to_dict()
    san = verdict.get("sanitizer")
    if not san:
        return []
    found = sanitizer_errors(verdict)
    if found:
        return [f"compute-sanitizer found errors: {', '.join(found)}"]
    gap = sanitizer_gap(verdict)
    return [gap] if gap else ["compute-sanitizer: no errors (memcheck, racecheck, initcheck)"]


def _best_line(session: "Session") -> str:
    """The fastest correct, timed check so far (before this one is kept)."""
    best = session.best()
    if not best:
        return ""
    speed = f", {best['speedup_vs_best']:.3g}x vs the faster baseline" if best.get("speedup_vs_best") is not None else ""
    return f"best so far: check {best['seq']} ({best['kind']}), {best['runtime_ms']:.4g} ms{speed}, candidate {str(best.get('candidate_hash'))[:12]}"
