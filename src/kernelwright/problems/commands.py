"""The `problems check|list|show` and `baseline` commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from kernelwright import written
from kernelwright.console import err, out
from kernelwright.errors import UsageError
from kernelwright.flags import policy_from_args


def problems_check_cmd(args: argparse.Namespace) -> int:
    """The degeneracy gate over one or more problems (files or folders)."""
    from kernelwright.judge.degeneracy import check_problem
    from kernelwright.problems.suite import load_suite

    problems = [e.problem for spec in args.problems for e in load_suite(spec)]
    policy = policy_from_args(args)
    results = []
    for i, problem in enumerate(problems, 1):
        with err.status(f"[{i}/{len(problems)}] {problem.name}") as status:
            results.append(check_problem(problem, device=args.device, policy=policy, progress=lambda m: status.update(f"[{i}/{len(problems)}] {problem.name}: {m}")))
    if args.json:
        sys.stdout.write(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
        return 0
    from rich.table import Table

    table = Table(title="degeneracy gate")
    for col in ("problem", "degenerate", "findings"):
        table.add_column(col)
    for r in results:
        text = "; ".join(f["detail"] for f in r.findings) or "none"
        table.add_row(r.problem.name, "[red]yes[/red]" if r.degenerate else "no", text)
    out.print(table)
    flagged = sum(r.degenerate for r in results)
    out.print(f"{flagged} of {len(results)} problem(s) degenerate")
    return 0


def _suite_rows(suite: str) -> list[dict]:
    """One row per file of the suite, in suite order: the entry with its computed metadata, or, for a
    problem that did not load or whose metadata failed, its name and `error` (the rest still list)."""
    from kernelwright.judge.problem_meta import metadata_or_errors
    from kernelwright.problems.suite import Unloaded, load_suite

    unloaded: list[Unloaded] = []
    entries = load_suite(suite, unloaded=unloaded)
    notes: list[str] = []  # what the metadata cache got, said once the spinner is gone
    with err.status(f"computing metadata of {len(entries)} problem(s)") as status:
        meta, failed = metadata_or_errors([e.problem for e in entries], progress=lambda i, n: status.update(f"computing metadata: {i}/{n}"),
                                          tell=notes.append)
    written.tell(notes)
    rows = [_problem_row(e, meta[e.problem.hash]) if e.problem.hash in meta else _failed_row(e.to_dict(), failed[e.problem.hash])
            for e in entries]
    rows += [_failed_row({"name": u.name, "spec": str(u.path), "level": u.level, "path": str(u.path)}, u.reason) for u in unloaded]
    return sorted(rows, key=lambda r: (r["level"] is not None, r["level"] or 0))  # stable: suite order within a level


def _problem_row(entry, m: dict) -> dict:
    return {**entry.to_dict(), "flops": m["flops"], "bytes": m["bytes"], "floor_ms": m["floor_ms"],
            "ceiling_ms": m["ceiling_ms"], "inputs": m["inputs"], "outputs": m["outputs"], "metadata_computed_on": m["computed_on"],
            "error": None}


def _failed_row(base: dict, reason: str) -> dict:
    keys = ("name", "spec", "suite", "level", "category", "id", "path", "hash", "flops", "bytes", "floor_ms", "ceiling_ms", "inputs",
            "outputs", "metadata_computed_on")
    return {**{k: base.get(k) for k in keys}, "error": reason}


def problems_list_cmd(args: argparse.Namespace) -> int:
    """The problems of a suite with their computed FLOPs, bytes, floor and ceiling; counts per level and
    category; then one line per problem that could not be listed, with why."""
    rows = _suite_rows(args.suite)
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    from rich.table import Table

    listed, failed = [r for r in rows if r["error"] is None], [r for r in rows if r["error"] is not None]
    table = Table(title=f"problems in {args.suite}")
    for col in ("level", "name", "category", "GFLOP", "data MB", "floor ms", "ceiling fp32 ms"):
        table.add_column(col, justify="right" if col not in ("name", "category") else "left")
    for r in listed:
        table.add_row("-" if r["level"] is None else str(r["level"]), r["name"], r["category"] or "-", f"{r['flops'] / 1e9:.3g}",
                      f"{r['bytes'] / 1e6:.4g}", f"{r['floor_ms']:.3g}", f"{r['ceiling_ms']['fp32']:.3g}")
    out.print(table)
    counts: dict = {}
    for r in listed:
        counts.setdefault(r["level"], {}).setdefault(r["category"] or "-", 0)
        counts[r["level"]][r["category"] or "-"] += 1
    for level in sorted(counts, key=lambda x: -1 if x is None else x):
        by_cat = ", ".join(f"{c} {n}" for c, n in sorted(counts[level].items()))
        out.print(f"level {'-' if level is None else level}: {sum(counts[level].values())} problem(s): {by_cat}")
    if failed:
        out.print(f"{len(failed)} of {len(rows)} problem(s) could not be listed:", highlight=False)
    for r in failed:
        where = f"level {r['level']} " if r["level"] is not None else ""
        out.print(f"  {where}{r['name']}: {r['error']}", highlight=False, markup=False)
    return 0


def problems_show_cmd(args: argparse.Namespace) -> int:
    """One problem: where it is, its computed metadata and its source."""
    from kernelwright.judge.problem_meta import metadata_for
    from kernelwright.problems.suite import load_suite

    spec = args.problem
    if not args.suite and ":" not in spec and not Path(spec).exists():
        spec = f"builtin:{spec}"  # a bare name is a built-in problem's
    if args.suite and not (":" in spec or spec.endswith(".py")):
        matches = [e for e in load_suite(args.suite) if e.problem.name == spec]
        if not matches:
            raise UsageError(f"no problem named {spec!r} in {args.suite}")
        entry = matches[0]
    else:
        got = load_suite(spec)
        if len(got) != 1:
            raise UsageError(f"{spec} names {len(got)} problems; show takes one (builtin:NAME, kernelbench:PATH:LEVEL:ID or a file)")
        entry = got[0]
    m = metadata_for([entry.problem], tell=lambda line: written.tell([line]))[entry.problem.hash]
    row = {**_problem_row(entry, m), "flops_by_op": m["flops_by_op"], "param_bytes": m["param_bytes"], "input_bytes": m["input_bytes"],
           "output_bytes": m["output_bytes"]}
    if args.json:
        sys.stdout.write(json.dumps({**row, "source": entry.problem.source}, indent=2) + "\n")
        return 0
    out.print(f"[bold]{entry.problem.name}[/bold]  {entry.spec}", highlight=False)
    out.print(f"level {entry.level if entry.level is not None else '-'}, category {entry.category or '-'}, sha256 {entry.problem.hash[:16]}", highlight=False)
    shapes = lambda xs: ", ".join(f"{x['dtype']}[{'x'.join(map(str, x['shape']))}]" for x in xs)  # noqa: E731
    out.print(f"inputs  {shapes(m['inputs'])}\noutputs {shapes(m['outputs'])}", highlight=False)
    out.print(f"FLOPs {m['flops']:,} ({', '.join(f'{k} {v:,}' for k, v in m['flops_by_op'].items()) or 'none counted'}); "
              f"bytes {m['bytes']:,} (inputs {m['input_bytes']:,}, outputs {m['output_bytes']:,}, parameters {m['param_bytes']:,})", highlight=False)
    out.print(f"floor {m['floor_ms']:.4g} ms (H200 vendor peaks); ceilings at the measured rates: "
              + ", ".join(f"{k} {v:.4g} ms" for k, v in m["ceiling_ms"].items()) + f"; computed on {m['computed_on']}", highlight=False)
    out.print("")
    out.print(entry.problem.source, highlight=False, markup=False)
    return 0


def baseline_cmd(args: argparse.Namespace) -> int:
    """Time eager and torch.compile for every problem of a suite; cache the times in the store."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kernelwright.judge import baseline
    from kernelwright.judge.evaluate import resolve_device
    from kernelwright.problems.suite import load_suite
    from kernelwright.store import Store

    entries = load_suite(args.suite)
    policy = policy_from_args(args)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    device = resolve_device(args.device)
    levels = {e.problem.hash: e.level for e in entries}
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=False)
    tasks: dict = {}
    failed: list = []

    def on_event(kind, problem, value):
        if kind == "phase":
            name = "compiling" if value.startswith("compiling") else "timing"
            total = len(entries) - len(tasks.get("cached", []))
            tasks[name] = progress.add_task(name, total=total)
        elif kind == "cached":
            tasks.setdefault("cached", []).append(problem.name)
            tasks.setdefault("cached_hashes", set()).add(problem.hash)
        elif kind == "compiled":
            progress.update(tasks["compiling"], advance=1, description=f"compiling ({problem.name}: "
                            + (f"{value[0]:.1f} s)" if value[0] is not None else "failed)"))
        elif kind == "timed":
            if value.error:
                failed.append((problem.name, value.error))
            progress.update(tasks["timing"], advance=1, description=f"timing ({problem.name})")

    with Store.open(args.store) as db:
        for e in entries:
            db.put_problem(e.problem.hash, e.problem.name, str(e.problem.path), e.problem.source)
        with progress:
            records = baseline.run([e.problem for e in entries], device=device, policy=policy, jobs=args.jobs, store=db,
                                   refresh=args.refresh, on_event=on_event)
    summary = baseline.ratio_summary(records, levels)
    written.tell([_baselines_line(records, tasks.get("cached_hashes", set()), len(entries), args.store)])
    if args.json:
        sys.stdout.write(json.dumps({"records": [r.to_dict() for r in records],
                                     "levels": {str(k): v for k, v in summary.items()}}, indent=2, default=str) + "\n")
        return 1 if failed else 0
    from rich.table import Table

    cached = set(tasks.get("cached", []))
    table = Table(title=f"baselines on {records[0].machine.get('gpu') if records else device} ({policy.precision}, torch.compile {policy.compile_mode})")
    for col in ("level", "problem", "eager ms", "compile ms", "eager/compile", "compile s", "source"):
        table.add_column(col, justify="left" if col in ("problem", "source") else "right")
    fmt = lambda x, f="{:.4g}": "-" if x is None else f.format(x)  # noqa: E731
    for e, r in zip(entries, records):
        ratio = r.eager_ms / r.compile_ms if r.eager_ms and r.compile_ms else None
        table.add_row(fmt(e.level, "{}"), r.problem, fmt(r.eager_ms), fmt(r.compile_ms), fmt(ratio, "{:.2f}"), fmt(r.compile_s, "{:.1f}"),
                      "cached" if r.problem in cached else ("failed" if r.error and r.eager_ms is None else "measured"))
    out.print(table)
    for level, s in sorted(summary.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        out.print(f"level {'-' if level is None else level}: eager/compile geometric mean {s['geomean']:.3f} over {s['n']} problem(s) "
                  f"(min {s['min']:.3f}, max {s['max']:.3f}; above 1: torch.compile is faster)")
    for name, why in failed:
        err.print(f"{name}: {why}", style="yellow", markup=False, highlight=False)
    return 1 if failed else 0


def _baselines_line(records: list, cached: set, n_problems: int, store: Optional[Path]) -> str:
    """What `baseline` put in the store: the problems, and the baselines it measured (not the cached ones)."""
    new = {r.problem_hash for r in records if r.problem_hash not in cached and r.eager_ms is not None}
    unstored = {r.problem_hash for r in records if r.problem_hash not in cached and r.eager_ms is None}
    return (written.recorded(f"{n_problems} problem(s) and {len(new)} new baseline(s)", store)
            + (f"; {len(cached)} already there, not measured again" if cached else "")
            + (f"; {len(unstored)} not stored: their timing failed" if unstored else ""))
