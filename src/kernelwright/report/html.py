"""An offline HTML report of a bench: one self-contained page, no remote resources.

`render_report(bench)` takes the bench dict (`kind: kernelwright.bench`, schema_version 1) and
returns one HTML document: header and policy, summary per level, fast_p curves, the speedup
distribution, a table of problems, each problem's evidence (sources, verdict, diff against the
reference), agent-run progress and a footer with every version and the full policy.

The page is built from a view of plain, already formatted values; the Jinja2 template escapes every
one of them (autoescape on). Only the SVG charts of `report.svg`, which escape their own text, are
marked safe. Any value of the bench may be null or missing: it shows as a dash.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from kernelwright.report import svg
from kernelwright.report.formats import (DASH, as_dict, as_list, fmt_ms, fmt_num, fmt_pct, fmt_x, ms, number, plain,
                                         seconds, to_json)

TEMPLATES = Path(__file__).resolve().parent / "templates"
STATUS_CLASS = {  # CSS class of each status: green, red, magenta, yellow, grey
    "correct": "ok", "incorrect": "bad", "compile_error": "bad", "runtime_error": "bad", "timeout": "bad",
    "rejected": "rejected", "infra_error": "infra", "missing": "missing",
}
SERIES = (("eager", "eager", "#2563eb", ""), ("compile", "torch.compile", "#ea580c", "7 4"),
          ("best", "faster of the two", "#16a34a", "2 3"))  # (key, legend, colour, dash)
BASELINE_WORDS = {"measured": "measured in this run", "cached": "cached from an earlier measurement",
                  "skip": "skipped (no baseline times)"}


def render_report(bench: dict) -> str:
    """The bench as one self-contained HTML document."""
    template = _environment().get_template("report.html.j2")
    return template.render(**_view(bench))


def _environment() -> Any:
    """A Jinja2 environment over this package's templates, autoescape on."""
    try:
        import jinja2
    except ImportError as exc:  # an optional extra
        raise ImportError("the HTML report needs jinja2: pip install jinja2 (in a checkout: pip install -e '.[report]')") from exc
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _safe(markup: str) -> Any:
    """Mark text that escaped its own input (the charts) as safe for the template."""
    from markupsafe import Markup

    return Markup(markup)


# -- header, summary, footer -------------------------------------------------------------------------


def _view(bench: Any) -> dict[str, Any]:
    """Everything the template shows, formatted."""
    bench = as_dict(bench)
    problems = sorted((p for p in as_list(bench.get("problems")) if isinstance(p, dict)), key=_order)
    anchors = _anchors(problems)
    metrics = as_dict(bench.get("metrics"))
    return {
        "header": _header(bench), "summary": _summary(metrics, as_dict(bench.get("bootstrap"))),
        "fast_p": _fast_p(as_dict(metrics.get("overall"))), "distribution": _distribution(problems),
        "rows": [_row(p, a) for p, a in zip(problems, anchors)],
        "details": [_detail(p, a) for p, a in zip(problems, anchors)],
        "runs": _runs(problems, anchors),
        "system": _system_rows(as_dict(bench.get("system"))), "policy_json": to_json(bench.get("policy")),
    }


def _header(bench: dict) -> dict[str, Any]:
    system = as_dict(bench.get("system"))
    solutions = [str(s) for s in as_list(bench.get("solutions"))]
    on_cpu = bench.get("device") == "cpu" or system.get("gpu") is None
    version = plain(system.get("kernelwright")) + (f" (commit {system['commit']})" if system.get("commit") else "")
    only = [str(x) for x in as_list(bench.get("only"))]
    suite = plain(bench.get("suite")) + (f" (a subset of {len(as_list(bench.get('problems')))} problems: --only)" if only else "")
    rows = [("suite", suite), ("solutions", ", ".join(solutions) or DASH),
            ("created", plain(bench.get("created_at"))), ("device", plain(bench.get("device"))),
            ("GPU", plain(system.get("gpu"))), ("driver", plain(system.get("driver"))),
            ("CUDA", plain(system.get("cuda"))), ("torch", plain(system.get("torch"))),
            ("kernelwright", version)]
    pending = [str(x) for x in as_list(bench.get("pending"))]
    return {"title": f"kernelwright bench: {plain(bench.get('suite'))}", "rows": rows, "on_cpu": on_cpu,
            "policy": _policy_sentence(as_dict(bench.get("policy"))),
            "incomplete": bench.get("complete") is False, "pending": ", ".join(pending),
            "warnings": [str(w) for w in as_list(bench.get("warnings"))]}


def _policy_sentence(policy: dict) -> str:
    """The precision policy in one plain sentence."""
    preset = policy.get("preset")
    libraries = [str(x) for x in as_list(policy.get("libraries"))]
    torch_ok = policy.get("allow_torch_compute")
    parts = [
        f"precision {plain(policy.get('precision'))}",
        f"preset {preset}: the verdicts follow that preset's settings" if preset else "no preset",
        f"{plain(policy.get('n_seeds'))} correctness seeds",
        "baselines " + BASELINE_WORDS.get(policy.get("baselines"), plain(policy.get("baselines"))),
        f"torch.compile mode {plain(policy.get('compile_mode'))}",
        "libraries allowed: " + (", ".join(libraries) or "none"),
        "torch compute in the candidate: " + {True: "allowed", False: "not allowed"}.get(torch_ok, DASH),
    ]
    return "Judged with " + "; ".join(parts) + "."


def _system_rows(system: dict) -> list[tuple[str, str]]:
    keys = ("gpu", "driver", "cuda", "torch", "python", "kernelwright", "commit")
    extra = [k for k in system if k not in keys]
    return [(k, plain(system.get(k))) for k in (*keys, *extra)]


def _summary(metrics: dict, boot: dict) -> dict[str, Any]:
    """Rows for the overall group and each level, and the notes under the table."""
    levels = as_dict(metrics.get("levels"))
    groups = [("overall", as_dict(metrics.get("overall")))]
    groups += [(f"level {k}", as_dict(levels[k])) for k in sorted(levels, key=_level_key)]
    confidence = number(boot.get("confidence"))
    return {"rows": [_summary_row(label, m) for label, m in groups],
            "ci": f"{100 * confidence:g}% CI" if confidence else "CI",
            "resamples": plain(boot.get("resamples")), "seed": plain(boot.get("seed")),
            "confidence": f"{100 * confidence:g}%" if confidence else DASH,
            "missing_baseline": as_dict(as_dict(metrics.get("overall")).get("n_missing_baseline"))}


def _summary_row(label: str, m: dict) -> dict[str, Any]:
    faster = as_dict(m.get("faster_than"))
    best = as_dict(as_dict(m.get("geomean_speedup")).get("best"))
    return {"label": label, "n": plain(m.get("n_problems")), "correct": plain(m.get("n_correct")),
            "missing": plain(m.get("n_missing")), "infra": plain(m.get("n_infra_error")),
            "pass_rate": fmt_pct(m.get("pass_rate")),
            "faster": [_faster(as_dict(faster.get(k))) for k in ("eager", "compile", "both")],
            "geo_correct": _geomean(as_dict(best.get("correct"))), "geo_all": _geomean(as_dict(best.get("all")))}


def _faster(block: dict) -> str:
    return f"{fmt_pct(block.get('over_1x'))} / {fmt_pct(block.get('over_5pct'))}"


def _geomean(block: dict) -> dict[str, str]:
    """The geometric mean, its interval and its count, each as text."""
    ci = as_list(block.get("ci95"))
    interval = f"[{fmt_x(ci[0])}, {fmt_x(ci[1])}]" if len(ci) == 2 else ""
    return {"value": fmt_x(block.get("value")), "ci": interval, "n": f"n={plain(block.get('n'))}"}


def _level_key(level: Any) -> tuple[int, float, str]:
    """Numeric levels first, in order; then anything else by its text."""
    n = number(level)
    if n is None and isinstance(level, str):
        try:
            n = float(level)
        except ValueError:
            n = None
    return (0, n, "") if n is not None else (1, 0.0, str(level))


# -- charts ----------------------------------------------------------------------------------------


def _fast_p(overall: dict) -> dict[str, Any]:
    """The fast_p chart and a table of the same numbers."""
    fast = as_dict(overall.get("fast_p"))
    keys = sorted({k for key, *_ in SERIES for k in as_dict(fast.get(key)) if _p(k) is not None}, key=_p)
    rows = [{"label": legend, "cells": [fmt_pct(as_dict(fast.get(key)).get(k)) for k in keys]} for key, legend, *_ in SERIES]
    if not keys:
        return {"chart": None, "ps": [], "rows": rows}
    series = [svg.Series(legend, color, tuple((_p(k), _pct(as_dict(fast.get(key)).get(k))) for k in keys), dash)
              for key, legend, color, dash in SERIES]
    xs = [_p(k) for k in keys]
    x = svg.Axis(min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1, tuple((v, f"{v:g}") for v in xs),
                 "p (speedup threshold)")
    y = svg.linear_axis(0, 100, "fast_p (% of problems)", fmt="{:g}%")
    chart = svg.line_chart(series, x, y, "fast_p: share of problems correct and faster than p times the baseline")
    return {"chart": _safe(chart), "ps": keys, "rows": rows}


def _p(key: Any) -> Optional[float]:
    try:
        return float(key)
    except (TypeError, ValueError):
        return None


def _pct(value: Any) -> Optional[float]:
    n = number(value)
    return None if n is None else 100 * n


def _distribution(problems: list[dict]) -> dict[str, Any]:
    """speedup_vs_best of correct problems as dots on a log2 axis; the others as counts."""
    points, no_baseline = [], 0
    for p in problems:
        if p.get("status") != "correct":
            continue
        s = number(as_dict(p.get("verdict")).get("speedup_vs_best"))
        if s is not None and s > 0:
            points.append((str(p.get("name")), s))
        else:
            no_baseline += 1
    failed = Counter(plain(p.get("status")) for p in problems if p.get("status") != "correct")
    chart = None
    if points:
        x = svg.log2_axis([v for _, v in points], "speedup vs the faster of eager and torch.compile (log2)")
        rules = (svg.Rule(1.0, "1x", "#111"), svg.Rule(0.95, "0.95x", "#999", left=True))
        chart = _safe(svg.strip_chart(points, x, "speedup vs best of the correct problems", rules))
    return {"chart": chart, "n": len(points), "no_baseline": no_baseline,
            "failed": sorted(failed.items()), "n_failed": sum(failed.values())}


# -- problems --------------------------------------------------------------------------------------


def _order(problem: dict) -> tuple:
    return (_level_key(problem.get("level")), str(problem.get("name")))


def _anchors(problems: list[dict]) -> list[str]:
    """One HTML id per problem from its name, made unique."""
    seen: set[str] = set()
    out = []
    for p in problems:
        base = "p-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", str(p.get("name"))).strip("-") or "problem")
        anchor, i = base, 2
        while anchor in seen:
            anchor, i = f"{base}-{i}", i + 1
        seen.add(anchor)
        out.append(anchor)
    return out


def _status(problem: dict) -> tuple[str, str]:
    status = plain(problem.get("status"))
    return status, STATUS_CLASS.get(status, "other")


def _row(problem: dict, anchor: str) -> dict[str, Any]:
    """One line of the per-problem table; `sort` holds the raw numbers for the sorting script."""
    v = as_dict(problem.get("verdict"))
    timing = as_dict(v.get("timing"))
    status, cls = _status(problem)
    numbers = [v.get("runtime_ms"), v.get("eager_ms"), v.get("compile_ms"), v.get("speedup_vs_eager"),
               v.get("speedup_vs_compile"), v.get("speedup_vs_best"), timing.get("n"), timing.get("iqr_ms"),
               v.get("efficiency"), v.get("max_abs_error")]
    shown = [fmt_ms(numbers[0]), fmt_ms(numbers[1]), fmt_ms(numbers[2]), fmt_x(numbers[3]), fmt_x(numbers[4]),
             fmt_x(numbers[5]), plain(timing.get("n")), fmt_ms(numbers[7]), fmt_pct(numbers[8]), fmt_num(numbers[9])]
    cells = [{"text": t, "sort": "" if number(n) is None else repr(number(n))} for t, n in zip(shown, numbers)]
    return {"anchor": anchor, "name": plain(problem.get("name")), "level": plain(problem.get("level")),
            "category": plain(problem.get("category")), "status": status, "cls": cls, "cells": cells}


def _detail(problem: dict, anchor: str) -> dict[str, Any]:
    """A problem's evidence: its solution's files, the verdict and the diff against the reference."""
    status, cls = _status(problem)
    solution = problem.get("solution") if isinstance(problem.get("solution"), dict) else None
    verdict = problem.get("verdict") if isinstance(problem.get("verdict"), dict) else None
    meta = [("level", plain(problem.get("level"))), ("category", plain(problem.get("category"))),
            ("spec", plain(problem.get("spec"))), ("problem hash", plain(problem.get("problem_hash"))),
            ("verdict id", plain(problem.get("verdict_id")))]
    meta += [("note", str(problem["note"]))] if problem.get("note") else []
    return {"anchor": anchor, "name": plain(problem.get("name")), "status": status, "cls": cls, "meta": meta,
            "solution": _solution(solution) if solution else None,
            "evidence": _evidence(verdict, status) if verdict else None,
            "diff": _diff(solution, problem.get("reference_source")) if solution else None}


def _solution(solution: dict) -> dict[str, Any]:
    files = {str(k): plain(v) for k, v in as_dict(solution.get("files")).items()}
    main = _main_name(solution)
    names = sorted(files, key=lambda n: (n != main, n))
    return {"source": plain(solution.get("source")), "ref": plain(solution.get("ref")), "main": plain(main),
            "files": [{"name": n, "text": files[n]} for n in names]}


def _main_name(solution: dict) -> Optional[str]:
    files = as_dict(solution.get("files"))
    main = solution.get("main")
    if main in files:
        return str(main)
    return next(iter(files), None) if main is None else str(main)


def _evidence(v: dict, status: str) -> dict[str, Any]:
    """What the verdict says, beyond the table: steps not run, guards fired, findings, timing, tools."""
    numbers = [("candidate", ms(v.get("runtime_ms"))), ("eager", ms(v.get("eager_ms"))),
               ("torch.compile", ms(v.get("compile_ms"))), ("baseline source", plain(v.get("baseline_source"))),
               ("speedup vs eager", fmt_x(v.get("speedup_vs_eager"))), ("speedup vs compile", fmt_x(v.get("speedup_vs_compile"))),
               ("speedup vs best", fmt_x(v.get("speedup_vs_best"))), ("max abs error", fmt_num(v.get("max_abs_error"))),
               ("max rel error", fmt_num(v.get("max_rel_error"))), ("floor", ms(v.get("floor_ms"))),
               ("efficiency", fmt_pct(v.get("efficiency"))), ("build", seconds(v.get("build_s")))]
    steps = [(plain(s.get("name")), plain(s.get("reason")))
             for s in map(as_dict, as_list(v.get("steps"))) if s.get("ran") is False]
    guards = [(plain(g.get("name")), plain(g.get("detail")))
              for g in map(as_dict, as_list(v.get("guards"))) if g.get("fired")]
    log = v.get("log") if status != "correct" and v.get("log") else None
    return {"numbers": numbers, "steps": steps, "guards": guards,
            "findings": [_finding(f) for f in as_list(v.get("static_findings"))],
            "timing": _pairs(as_dict(v.get("timing"))), "resources": _pairs(as_dict(v.get("resources"))),
            "sanitizer": _sanitizer(v.get("sanitizer")), "log": None if log is None else str(log),
            "json": to_json(v)}


def _pairs(block: dict) -> list[tuple[str, str]]:
    """A small record as (key, value) lines; keys ending in _ms get milliseconds."""
    return [(str(k), ms(x) if str(k).endswith("_ms") else plain(x)) for k, x in block.items()]


def _finding(f: Any) -> str:
    f = as_dict(f) or {"detail": f}
    where = f"{plain(f.get('file'))}:{plain(f.get('line'))}" if f.get("file") else ""
    return " ".join(x for x in (plain(f.get("rule")), where, plain(f.get("detail"))) if x)


def _sanitizer(result: Any) -> Optional[list[str]]:
    """compute-sanitizer's summary: one line per tool and its first findings."""
    if not isinstance(result, dict):
        return None
    if not result.get("ran"):
        return [f"sanitizer not run: {plain(result.get('reason'))}"]
    lines = []
    for r in map(as_dict, as_list(result.get("tools"))):
        errors = "?" if r.get("errors") is None else str(r.get("errors"))
        lines.append(f"{plain(r.get('tool'))}: {errors} error(s)" + (f" ({r['note']})" if r.get("note") else ""))
        lines += [f"  {line}" for line in as_list(r.get("findings"))[:4]]
    return lines


def _diff(solution: dict, reference: Any) -> dict[str, Any]:
    """The main file against the reference source, as classed lines of a unified diff."""
    main = _main_name(solution)
    text = as_dict(solution.get("files")).get(main)
    if not isinstance(text, str) or not isinstance(reference, str):
        return {"note": "no diff: the main file or the reference source is missing", "lines": []}
    raw = difflib.unified_diff(reference.splitlines(), text.splitlines(), "reference", str(main), lineterm="")
    lines = [{"cls": _diff_class(line), "text": line} for line in raw]
    return {"note": "" if lines else "the main file equals the reference source", "lines": lines}


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "head"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")


# -- agent runs ------------------------------------------------------------------------------------


def _runs(problems: list[dict], anchors: list[str]) -> list[dict[str, Any]]:
    """One chart and table per problem that came from an agent run."""
    return [_run(p, a) for p, a in zip(problems, anchors) if isinstance(p.get("run"), dict)]


def _run(problem: dict, anchor: str) -> dict[str, Any]:
    run = as_dict(problem.get("run"))
    progress = [as_dict(r) for r in as_list(run.get("progress"))]
    rows = [{"round": plain(r.get("round")), "label": plain(r.get("label")), "candidates": plain(r.get("candidates")),
             "correct": plain(r.get("correct")), "best": fmt_x(r.get("best_speedup_vs_best")),
             "so_far": fmt_x(r.get("best_so_far"))} for r in progress]
    meta = [("run", plain(run.get("id"))), ("status", plain(run.get("status"))),
            ("strategy", plain(run.get("strategy"))), ("model", plain(run.get("model")))]
    return {"anchor": anchor, "name": plain(problem.get("name")), "meta": meta, "rows": rows,
            "chart": _run_chart(progress, plain(problem.get("name")))}


def _run_chart(progress: list[dict], name: str) -> Any:
    """best_so_far per round (line) and each round's best (dots), with the 1x line."""
    xs = [number(r.get("round")) if number(r.get("round")) is not None else float(i) for i, r in enumerate(progress)]
    so_far = [number(r.get("best_so_far")) for r in progress]
    per_round = [number(r.get("best_speedup_vs_best")) for r in progress]
    values = [v for v in so_far + per_round if v is not None]
    if not xs or not values:
        return None
    lo, hi = min(xs), max(xs)
    if len(set(xs)) > 10:  # many rounds: round ticks, not one per round
        x = svg.linear_axis(lo, hi, "round")
    else:
        x = svg.Axis(lo, hi if hi > lo else lo + 1, tuple((v, f"{v:g}") for v in sorted(set(xs))), "round")
    top = max(values + [1.0]) * 1.1
    y = svg.linear_axis(min(0.0, min(values)), top, "speedup vs best baseline", fmt="{:.2f}x")
    series = [svg.Series("best so far", "#16a34a", tuple(zip(xs, so_far))),
              svg.Series("best of the round", "#9333ea", tuple(zip(xs, per_round)), "2 4")]
    frame = svg.Frame(width=520, height=260)
    return _safe(svg.line_chart(series, x, y, f"agent run progress: {name}", (svg.Rule(1.0, "1x"),), frame))
