"""`kernelwright bench`, `report` and `compare`. Results on stdout (tables, or JSON with --json);
progress on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from rich.markup import escape
from rich.table import Table

from kernelwright import written
from kernelwright.client.commands import pool_flags, service_flag
from kernelwright.errors import UsageError
from kernelwright.flags import add_policy_flags, device_flag, json_flag, no_store_flag, policy_from_args, store_flag
from kernelwright.report.metrics import Bootstrap


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1%}"


def _x(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3f}x"


def _ci(block: dict[str, Any]) -> str:
    ci = block.get("ci95")
    return _x(block.get("value")) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" n={block.get('n')}"


def _boot(args: argparse.Namespace) -> Bootstrap:
    try:
        return Bootstrap(resamples=args.resamples, seed=args.bootstrap_seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def summary_table(doc: dict[str, Any]) -> Table:
    """Overall and per-level metrics."""
    gpu = (doc.get("system") or {}).get("gpu")
    t = Table(title=f"bench of {escape(str(doc.get('suite')))} on {escape(str(gpu or 'cpu'))}",
              caption="every problem in every denominator (missing and failed ones too); faster = over 1x / t < 0.95 t0; "
                      "geomeans vs the faster baseline timed, bootstrap 95 % intervals (none under 5 values)"
                      + ("; CPU backend: times check the flow, never claims" if not gpu else ""))
    for col in ("group", "problems", "correct", "missing", "infra", "pass", "> eager", "> compile", "> both", "fast_1 (best)",
                "geomean correct", "geomean all"):
        t.add_column(col, justify="left" if col == "group" else "right")
    groups = [("overall", doc["metrics"]["overall"])] + [(f"level {k}", m) for k, m in doc["metrics"]["levels"].items()]
    for name, m in groups:
        f, g = m["faster_than"], m["geomean_speedup"]["best"]
        t.add_row(name, str(m["n_problems"]), str(m["n_correct"]), str(m["n_missing"]), str(m["n_infra_error"]), _pct(m["pass_rate"]),
                  *(f"{_pct(f[b]['over_1x'])} / {_pct(f[b]['over_5pct'])}" for b in ("eager", "compile", "both")),
                  _pct(m["fast_p"]["best"]["1"]), _ci(g["correct"]), _ci(g["all"]))
    return t


def problems_table(doc: dict[str, Any]) -> Table:
    """One row per problem."""
    t = Table(title="problems")
    for col in ("level", "problem", "status", "runtime", "eager", "compile", "vs eager", "vs compile", "vs best", "note"):
        t.add_column(col, justify="right" if col in ("runtime", "eager", "compile", "vs eager", "vs compile", "vs best") else "left")
    for r in doc["problems"]:
        v = r.get("verdict") or {}
        ms = [("-" if v.get(k) is None else f"{v[k]:.4g} ms") for k in ("runtime_ms", "eager_ms", "compile_ms")]
        t.add_row("-" if r.get("level") is None else str(r["level"]), escape(r["name"]), r["status"], *ms,
                  *(_x(v.get(k)) for k in ("speedup_vs_eager", "speedup_vs_compile", "speedup_vs_best")), escape(r.get("note") or ""))
    return t


def bench_cmd(args: argparse.Namespace) -> int:
    """Judge one candidate per problem of a suite; print the metrics (and write the bench JSON)."""
    from kernelwright.report.bench import BenchConfig

    from kernelwright.client.commands import check_pool_args, pool_from_args, pool_wanted

    import dataclasses

    policy = policy_from_args(args)
    try:
        config = BenchConfig(suite=args.suite, sources=tuple(args.solutions), only=tuple(_names(args.only)), device=args.device,
                             store=args.store, keep=not args.no_store, out=args.o, resume=args.resume, boot=_boot(args))
        if pool_wanted(args):
            from kernelwright.report.bench import precheck

            check_pool_args(args, policy)  # before any worker starts: a policy the pool cannot honour,
            precheck(config, policy)  # an unknown --only name, bad solutions or a resume file of another policy are usage errors at once
        pool = pool_from_args(args, args.device)  # after the config is known good: nothing to close on a usage error
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if pool is None:
        return _bench(args, config, policy)
    try:  # the pool decides the device (a Ray cluster's GPUs, not this driver's)
        return _bench(args, dataclasses.replace(config, pool=pool, device=pool.device), policy)
    finally:
        pool.close()


def _bench(args: argparse.Namespace, config: Any, policy: Any) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kernelwright.console import err, out
    from kernelwright.report.bench import run_bench

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[phase]}"))
    with Progress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("bench", total=None, phase="")

        def on_start(i: int, n: int, name: str) -> None:
            bar.update(task, total=n, completed=i, description=name, phase="")

        doc = run_bench(config, policy, on_start=on_start, say=lambda m: bar.update(task, phase=m[:60]),
                        warn=lambda m: err.print(f"warning: {m}", style="yellow", markup=False, highlight=False))
        bar.update(task, completed=len(doc["problems"]), description="done", phase="")
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        written.tell(written_lines(doc, args))
        return 0
    out.print(problems_table(doc))
    out.print(summary_table(doc))
    p = doc["policy"]
    out.print(f"policy: precision {p.get('precision')}, preset {p.get('preset') or 'none'}, {p.get('n_seeds')} seeds, baselines {p.get('baselines')}, "
              f"torch.compile {p.get('compile_mode') if p.get('compile_baseline') else 'not timed'}, libraries {', '.join(p.get('libraries') or []) or 'none'}",
              highlight=False, markup=False)
    for w in doc.get("warnings", []):
        err.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
    written.tell(written_lines(doc, args))
    return 0


def written_lines(doc: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """What the bench wrote, and what it did not and why: the bench file and the store."""
    rows = doc["problems"]
    lines = [written.wrote(args.o, f"the bench document, {len(rows)} problem(s)") if args.o else "bench file not written: no -o FILE given"]
    judged = [r for r in rows if r.get("verdict")]
    kept = [r for r in judged if r.get("verdict_id")]
    if args.no_store:
        lines.append(written.not_recorded("verdicts", f"--no-store ({len(judged)} judged)"))
    elif judged:
        lines.append(written.recorded(f"{len(kept)} of {len(judged)} verdict(s)", args.store)
                     + ("" if len(kept) == len(judged) else "; the others' notes say why not"))
    return lines


def _names(values: Optional[list[str]]) -> list[str]:
    return [n.strip() for v in values or () for n in v.split(",") if n.strip()]


def report_cmd(args: argparse.Namespace) -> int:
    """One offline HTML file from a bench JSON or a run."""
    from kernelwright.report.compare import load_side
    from kernelwright.report.html import render_report

    doc = load_side(args.source, args.store, _boot(args))
    try:
        html = render_report(doc)
    except ImportError as exc:  # the `report` extra is missing: say what was not written, and why
        written.tell([written.skipped(args.o, str(exc))])
        return 1
    args.o.parent.mkdir(parents=True, exist_ok=True)
    args.o.write_text(html, encoding="utf-8")
    written.tell([written.wrote(args.o, f"the HTML report, {len(html) // 1024} KiB, {len(doc['problems'])} problem(s)")])
    return 0


def compare_table(doc: dict[str, Any]) -> tuple[Table, Table]:
    """Per-problem rows and the aggregate, A beside B."""
    per = Table(title=f"A = {escape(doc['a'])}, B = {escape(doc['b'])}: speedups vs the faster baseline of each side's own session")
    for col in ("problem", "A", "B", "A speedup", "B speedup", "B / A", "change"):
        per.add_column(col, justify="right" if "speedup" in col or col == "B / A" else "left")
    for r in doc["problems"]:
        per.add_row(escape(r["name"]), r["status_a"] or "-", r["status_b"] or "-", _x(r["speedup_a"]), _x(r["speedup_b"]), _x(r["ratio"]), r["change"])
    agg = Table(title="aggregate")
    for col in ("metric", "A", "B"):
        agg.add_column(col, justify="left" if col == "metric" else "right")
    a, b = doc["aggregate"]["a"], doc["aggregate"]["b"]
    fmt = {"pass_rate": _pct, "faster_than_both_over_5pct": _pct, "fast_1_best": _pct, "geomean_best_correct": _x, "geomean_best_all": _x}
    for key in a:
        f = fmt.get(key, lambda v: "-" if v is None else str(v))
        agg.add_row(key, f(a[key]), f(b[key]))
    p = doc["aggregate"]["paired"]
    agg.add_row("paired B/A geomean", "", _ci({"value": p["geomean_ratio"], "ci95": p["ci95"], "n": p["n"]}))
    return per, agg


def compare_cmd(args: argparse.Namespace) -> int:
    """Two benches or runs side by side."""
    from kernelwright.console import err, out
    from kernelwright.report.compare import compare, load_side

    boot = _boot(args)
    doc = compare(load_side(args.a, args.store, boot), load_side(args.b, args.store, boot), (args.a, args.b), boot)
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        return 0
    for w in doc["warnings"]:
        err.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
    for table in compare_table(doc):
        out.print(table)
    return 0


def _boot_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples per interval (default 10000)")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap (default 0; same verdicts, same intervals)")
    store_flag(p)


def add_parsers(sub: Any) -> None:
    """Register bench, report and compare."""

    b = sub.add_parser("bench", help="judge one candidate per problem of a suite: pass rate, faster-than rates, fast_p, geomean speedups")
    b.add_argument("--suite", required=True, help="builtin, builtin:LEVEL, kernelbench:PATH[:LEVEL], or a folder of problems "
                                                   "(NAME.py files, or NAME/problem.py folders such as examples/cpu)")
    service_flag(b)
    pool_flags(b)
    b.add_argument("--solutions", nargs="+", default=[], metavar="DIR|RUN",
                   help="folders holding NAME.py or NAME/model_new.py per problem (or under levelN/), and run ids (their best candidate); "
                        "default: the model_new.py beside each problem written as DIR/problem.py (the shipped examples: --suite examples/cpu)")
    b.add_argument("--only", action="append", metavar="NAMES", help="comma-separated problem names to keep (repeatable)")
    device_flag(b)
    json_flag(b, help="print the bench document as JSON on stdout and nothing else there")
    b.add_argument("-o", type=Path, default=None, metavar="FILE", help="write the bench JSON here, rewritten after every problem")
    b.add_argument("--resume", action="store_true", help="take finished problems back from -o FILE (same policy, problem and files)")
    no_store_flag(b, help="do not record the verdicts in the store")
    _boot_flags(b)
    add_policy_flags(b)
    b.set_defaults(func=bench_cmd)
    r = sub.add_parser("report", help="one self-contained, offline HTML report of a bench JSON or a run (the `report` extra)")
    r.add_argument("source", metavar="BENCH_JSON|RUN", help="a file written by `bench -o`, or a run id")
    r.add_argument("-o", type=Path, required=True, metavar="FILE", help="the HTML file to write")
    _boot_flags(r)
    r.set_defaults(func=report_cmd)
    c = sub.add_parser("compare", help="two benches or runs side by side, per problem and in aggregate")
    c.add_argument("a", metavar="A", help="a bench JSON or a run id")
    c.add_argument("b", metavar="B", help="a bench JSON or a run id")
    json_flag(c, help="print the comparison as JSON on stdout and nothing else there")
    _boot_flags(c)
    c.set_defaults(func=compare_cmd)
