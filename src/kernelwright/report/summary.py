"""Readable summaries of verdicts for the terminal (rich)."""

from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelwright.judge import sandbox_check
from kernelwright.core.records import Status, Verdict

STATUS_STYLE = {
    Status.CORRECT: "green", Status.INCORRECT: "red", Status.COMPILE_ERROR: "red", Status.RUNTIME_ERROR: "red",
    Status.TIMEOUT: "red", Status.REJECTED: "magenta", Status.INFRA_ERROR: "yellow",
}


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4g} ms"


def _x(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _num(value: Optional[float], fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def headline(v: Verdict) -> str:
    """The status and its reason in one line: the first thing a reader needs."""
    if v.status == Status.CORRECT:
        if v.runtime_ms is None:
            return f"correct: {v.problem['name']} matches the reference on every case (not timed)"
        vs = f", {_x(v.speedup_vs_best)} vs the faster baseline" if v.speedup_vs_best is not None else ""
        return f"correct: {v.problem['name']} in {_ms(v.runtime_ms)}{vs}"
    first = (v.log or "").strip().splitlines()
    return f"{v.status.value}: {first[0]}" if first else v.status.value


def print_verdict(console: Console, v: Verdict, verdict_id: Optional[str] = None) -> None:
    """The status and its reason first (the rest of the message under it); then the problem and
    candidate, times, speedups, floor and efficiency; guards that fired; steps not run."""
    style = STATUS_STYLE.get(v.status, "white")
    status, _, reason = headline(v).partition(":")
    console.print(f"[bold {style}]{status}[/]:{escape(reason)}", highlight=False, soft_wrap=True)  # one line, whatever its length
    rest = "\n".join((v.log or "").strip().splitlines()[1:]) if v.status != Status.CORRECT else ""
    if rest.strip():
        console.print(rest, highlight=False, markup=False, soft_wrap=True)
    console.print("")
    head = f"{escape(v.problem['name'])}  candidate {str(v.candidate.get('hash') or '-')[:12]} ({v.candidate.get('build_path')})"
    console.print(head + (f"  [dim]{verdict_id}[/]" if verdict_id else ""), highlight=False)
    _print_numbers(console, v)
    unconfined = sandbox_check.plainly(v.sandbox)
    if unconfined:
        console.print(f"[bold yellow]{unconfined}[/]", highlight=False)
    fired = [g for g in v.guards if g.fired]
    for g in fired:
        console.print(f"[magenta]guard {g.name} fired:[/] {escape(g.detail)}", highlight=False)
    _print_skipped(console, v)
    if v.sanitizer is not None:
        from kernelwright.judge.sanitize import describe

        console.print(describe(v.sanitizer), highlight=False, markup=False)
        for r in v.sanitizer.get("tools", []):
            for line in r.get("findings", [])[:4]:
                console.print(f"  {r['tool']}: {line}", style="dim", highlight=False, markup=False)


def _print_numbers(console: Console, v: Verdict) -> None:
    t = Table(show_header=False, box=None, pad_edge=False)
    rows = [
        ("build", "-" if v.build_s is None else f"{v.build_s:.3g} s"),
        ("candidate", _ms(v.runtime_ms) + (f"  (n={v.timing.n}, IQR {v.timing.iqr_ms:.3g} ms"
                                       + (f", harness overhead {v.timing.overhead_ms:.3g} ms subtracted" if v.timing.overhead_ms else "")
                                       + ")" if v.timing else "")),
        ("eager", _ms(v.eager_ms)), ("torch.compile", _ms(v.compile_ms)),
        ("speedup vs eager", _x(v.speedup_vs_eager)), ("speedup vs compile", _x(v.speedup_vs_compile)),
        ("speedup vs best", _x(v.speedup_vs_best)), (_floor_label(v), _ms(v.floor_ms)),
        ("efficiency", "-" if v.efficiency is None else f"{v.efficiency:.1%}"),
        ("max abs error", _num(v.max_abs_error)), ("max rel error", _num(v.max_rel_error)),
        ("device", f"{v.system.gpu or 'cpu'} (torch {v.system.torch})" if v.system else "-"),
    ]
    if v.policy.get("preset") or v.policy.get("precision", "fp32") != "fp32":
        preset = v.policy.get("preset")
        rows.append(("policy", f"precision {v.policy.get('precision')}" + (f", preset {preset} (its settings; every guard on)" if preset else "")))
    for key, value in rows:
        t.add_row(f"[dim]{key}[/]", value)
    console.print(t)


def _print_skipped(console: Console, v: Verdict) -> None:
    """Steps not run, grouped by reason; one line when none ran for one reason."""
    skipped = [s for s in v.steps if not s.ran]
    if not skipped:
        return
    by_reason: dict[str, list[str]] = {}
    for s in skipped:
        by_reason.setdefault(s.reason, []).append(s.name)
    if len(by_reason) == 1 and len(skipped) == len(v.steps):
        console.print(f"steps not run: all {len(skipped)} ({skipped[0].reason})", style="dim", highlight=False, markup=False)
        return
    lines = [f"  {', '.join(names)}: {reason}" for reason, names in by_reason.items()]
    console.print("steps not run:\n" + "\n".join(lines), style="dim", highlight=False, markup=False)


def _floor_label(v: Verdict) -> str:
    """Whose peaks the verdict's floor is at: its GPU's where the judge knows them, else the H200's."""
    from kernelwright.judge.roofline import peaks_for

    gpu = v.system.gpu if v.system else None
    peaks = peaks_for(gpu)
    return f"floor ({peaks.gpu if gpu and peaks.known else 'H200'} peaks)"


def print_table(console: Console, verdicts: list[Verdict]) -> None:
    """One row per verdict."""
    on_cpu = any(v.system and v.system.gpu is None for v in verdicts)
    caption = "CPU backend: times are for checking the flow, never claims; the floor is an H200 figure" if on_cpu else None
    t = Table(title="verdicts", caption=caption)
    for col in ("problem", "status", "candidate", "eager", "compile", "vs eager", "vs compile", "vs best", "floor", "efficiency"):
        t.add_column(col)
    for v in verdicts:
        t.add_row(
            v.problem["name"], f"[{STATUS_STYLE.get(v.status, 'white')}]{v.status.value}[/]", _ms(v.runtime_ms),
            _ms(v.eager_ms), _ms(v.compile_ms), _x(v.speedup_vs_eager), _x(v.speedup_vs_compile),
            _x(v.speedup_vs_best), _ms(v.floor_ms), "-" if v.efficiency is None else f"{v.efficiency:.1%}",
        )
    console.print(t)
