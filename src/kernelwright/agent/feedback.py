"""What the model is told about a verdict or a build: compact, sanitised, length-capped.

`sanitize` strips terminal escapes and control characters, replaces this machine's absolute paths
(work folders, the build cache, the interpreter's and this package's folders, the home folder)
with placeholders, and caps the length; every text fed to a model goes through it.
"""

from __future__ import annotations

import functools
import os
import re
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Mapping

from kernelwright.agent.judging import BuildReport, Judged
from kernelwright.core.records import Status, Verdict, truncate

DEFAULT_LIMIT = 6000
LOG_LIMIT = 2500  # characters of a compiler or runtime log shown
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_WORKDIR = re.compile(r"(?:/[^\s'\"():]*)?/kw-[A-Za-z0-9_.-]+(/candidate\b)?")  # the judge's and the agent's temporary folders


@functools.lru_cache(maxsize=1)
def _install_prefixes() -> tuple[tuple[str, str], ...]:
    """(absolute prefix, placeholder) pairs of this package and the interpreter."""
    import kernelwright

    pairs = [(str(Path(kernelwright.__file__).resolve().parent), "<kernelwright>")]
    pairs += [(path, "<python>") for key, path in sysconfig.get_paths().items() if key in ("purelib", "platlib", "stdlib")]
    return tuple(pairs)


def _specific_prefixes(extra: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """The caller's folders (a workspace), the build cache (looked up on each call:
    KERNELWRIGHT_CACHE may move it) and the installation, longest first; the first pair given
    for a prefix wins."""
    from kernelwright.judge.build import cache_dir

    pairs = [*((str(p), h) for p, h in (extra or {}).items()), (str(cache_dir()), "<cache>"), *_install_prefixes()]
    kept = {p: h for p, h in reversed(pairs) if p not in ("", "/")}
    return sorted(kept.items(), key=lambda ph: -len(ph[0]))


def sanitize(text: str, limit: int = DEFAULT_LIMIT, *, paths: Mapping[str, str] | None = None) -> str:
    """Text safe to show a model: no escapes or control characters, no absolute paths of this
    machine (`paths` adds {prefix: placeholder} pairs, e.g. a workspace), at most `limit` characters.
    Named folders go first, then the judge's temporary folders, then the temp and home folders."""
    text = _ANSI.sub("", str(text)).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    text = _replace(text, _specific_prefixes(paths))
    text = _WORKDIR.sub(lambda m: "<candidate>" if m.group(1) else "<workdir>", text)
    text = _replace(text, [(tempfile.gettempdir(), "<tmp>"), (str(Path.home()), "~")])
    return truncate(text, limit)


def _replace(text: str, pairs: list[tuple[str, str]]) -> str:
    for prefix, placeholder in pairs:
        if prefix.rstrip("/") == "":
            continue  # a home folder of "/" must not eat every path
        text = text.replace(prefix, placeholder)
        real = os.path.realpath(prefix)
        if real != prefix:
            text = text.replace(real, placeholder)
    return text


def head(text: str, limit: int = LOG_LIMIT) -> str:
    """The first lines of a log up to `limit` characters, saying how many lines were left out."""
    text = text.strip()
    if len(text) <= limit:
        return text
    kept = text[:limit].rsplit("\n", 1)[0]
    left = text.count("\n") - kept.count("\n")
    return f"{kept}\n... [{left} more line(s) not shown]"


# -- verdicts ---------------------------------------------------------------------------------


def describe(judged: Judged, *, target_speedup: float | None, limit: int = DEFAULT_LIMIT) -> str:
    """The verdict as the model reads it."""
    v = judged.verdict
    what = {"verify": "correctness check", "full": "full judgement", "final": "final judgement on fresh seeds"}.get(judged.mode, judged.mode)
    lines = [f"status: {v.status.value} ({what}; candidate {judged.candidate_hash[:12]})"]
    body = _BODIES.get(v.status, _other)
    lines += body(v, judged, target_speedup)
    lines += _notes(v)
    return sanitize("\n".join(line for line in lines if line is not None), limit)


def _compile_error(v: Verdict, judged: Judged, target: float | None) -> list[str]:
    return ["the build failed. Compiler output (errors first):", head(v.log)]


def _incorrect(v: Verdict, judged: Judged, target: float | None) -> list[str]:
    lines = [_errors(v)]
    lines += [f"failed check {g.name}: {g.detail}" for g in v.guards if g.fired]
    lines.append(head(v.log))
    return lines


def _rejected(v: Verdict, judged: Judged, target: float | None) -> list[str]:
    fired = [g for g in v.guards if g.fired]
    lines = [f"refused by guard {g.name}: {g.detail}" for g in fired] or ["refused by the judge"]
    lines.append(head(v.log))
    return lines


def _runtime(v: Verdict, judged: Judged, target: float | None) -> list[str]:
    intro = "the candidate exceeded a time limit" if v.status == Status.TIMEOUT else "the candidate raised or crashed"
    return [f"{intro}:", head(v.log)]


def _infra(v: Verdict, judged: Judged, target: float | None) -> list[str]:
    return ["the judge itself failed (this says nothing about your code; the same candidate may be judged again):", head(v.log, 800)]


def _other(v: Verdict, judged: Judged, target: float | None) -> list[str]:
    return [head(v.log)]


def _correct(v: Verdict, judged: Judged, target: float | None) -> list[str]:
    if v.runtime_ms is None:
        return [_errors(v), "correct on every case; not timed here (profile() or submit() time it)"]
    return [_errors(v), _times(v), _speedups(v), _efficiency(v), _target(v, target)]


_BODIES = {
    Status.COMPILE_ERROR: _compile_error, Status.INCORRECT: _incorrect, Status.REJECTED: _rejected,
    Status.RUNTIME_ERROR: _runtime, Status.TIMEOUT: _runtime, Status.INFRA_ERROR: _infra, Status.CORRECT: _correct,
}


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g} ms"


def _x(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}x"


def _errors(v: Verdict) -> str | None:
    if v.max_abs_error is None and v.max_rel_error is None:
        return None
    rel = "n/a" if v.max_rel_error is None else f"{v.max_rel_error:.3g}"
    abs_ = "n/a" if v.max_abs_error is None else f"{v.max_abs_error:.3g}"
    return f"max abs error {abs_}, max error relative to the tolerance {rel}"


def _times(v: Verdict) -> str:
    n = f" (median of {v.timing.n} calls, IQR {v.timing.iqr_ms:.3g} ms)" if v.timing else ""
    source = getattr(v.baseline_source, "value", v.baseline_source) or "not timed"
    return f"time: {_ms(v.runtime_ms)}{n}; eager {_ms(v.eager_ms)}, torch.compile {_ms(v.compile_ms)} (baselines {source})"


def _speedups(v: Verdict) -> str:
    return (f"speedup: {_x(v.speedup_vs_eager)} vs eager, {_x(v.speedup_vs_compile)} vs torch.compile, "
            f"{_x(v.speedup_vs_best)} vs the faster of the two")


def _efficiency(v: Verdict) -> str | None:
    if v.efficiency is None and v.floor_ms is None:
        return None
    eff = "n/a" if v.efficiency is None else f"{100 * v.efficiency:.1f}%"
    return f"efficiency: {eff} of the measured hardware ceiling; physics floor {_ms(v.floor_ms)}"


def best_speedup(v: Verdict) -> float | None:
    """The speedup a target is measured against: vs the faster baseline, else vs eager."""
    return v.speedup_vs_best if v.speedup_vs_best is not None else v.speedup_vs_eager


def _target(v: Verdict, target: float | None) -> str | None:
    if target is None:
        return None
    got = best_speedup(v)
    if got is None:
        return f"target {target:g}x: unknown (no baseline time)"
    if got >= target:
        return f"target {target:g}x: met ({got:.3g}x, {100 * (got / target - 1):.0f}% above it)"
    return f"target {target:g}x: not met ({got:.3g}x; {100 * (target / got - 1):.0f}% faster needed)"


def _notes(v: Verdict) -> list[str]:
    """Guards that fired without deciding the status, and the static findings, one line each."""
    lines = []
    if v.status == Status.CORRECT:
        lines += [f"note: guard {g.name} fired: {g.detail}" for g in v.guards if g.fired]
    if v.static_findings:
        found = [f"{f.get('rule')} at {f.get('file')}:{f.get('line')}" for f in v.static_findings[:8]]
        more = f" and {len(v.static_findings) - 8} more" if len(v.static_findings) > 8 else ""
        lines.append("static findings (advisory): " + "; ".join(found) + more)
    return lines


# -- builds -----------------------------------------------------------------------------------


def describe_build(report: BuildReport, *, limit: int = DEFAULT_LIMIT) -> str:
    """A compile-only result as the model reads it."""
    if not report.ok:
        return sanitize(f"build failed after {report.seconds:.1f} s. Compiler output (errors first):\n{head(report.log)}", limit)
    lines = [f"build ok ({report.build_path}) in {report.seconds:.1f} s"]
    lines += [_resources(r) for r in report.resources]
    if report.log.strip():
        lines.append(head(report.log, 1200))
    return sanitize("\n".join(lines), limit)


def _resources(row: dict[str, Any]) -> str:
    parts = [f"{k} {row[k]}" for k in ("registers", "shared_bytes", "spills") if row.get(k) is not None]
    cached = " (from the build cache)" if row.get("cached") else ""
    return f"  {row.get('name')}{cached}" + (": " + ", ".join(parts) if parts else "")
