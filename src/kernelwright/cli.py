"""The kernelwright command line (argparse). Results on stdout; progress and logs on stderr.

Exit codes: 0 when the command did its job (an eval that reached any verdict), 2 for usage errors
and malformed inputs, 1 for other failures; `eval --exit-status` and `check` exit by the verdict's
status instead (workspace.exits).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional

from rich.console import Console

from kernelwright import written
from kernelwright.judge.policy import BASELINE_MODES, COMPILE_MODES, PRECISIONS, PRESETS, Policy, TimingConfig, kernelbench_preset
from kernelwright.judge.provenance import LIBRARIES
from kernelwright.problems.loader import ProblemError
from kernelwright.problems.sizes import HELP as SIZE_HELP, SIZES

out = Console(width=None if sys.stdout.isatty() else 160)  # tables unwrapped when piped
# Progress and errors: wrapped at the terminal's width on a terminal, never wrapped when stderr is a
# file or a pipe (a log line stays one line).
err = Console(stderr=True, soft_wrap=not sys.stderr.isatty())

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


from kernelwright.errors import UsageError  # noqa: E402 - one class for `-m kernelwright.cli` and imports


def policy_from_args(args: argparse.Namespace) -> Policy:
    try:
        common = dict(precision=args.precision, baselines=args.baselines, compile_baseline=args.compile_baseline and args.baselines != "skip",
                      compile_mode=args.compile_mode,
                      time_candidate=not args.correctness_only, allow_torch_compute=args.allow_torch_compute,
                      libraries=tuple(args.allow_library or ()), sanitize=args.sanitize,
                      sandbox=getattr(args, "sandbox", "auto"), size=getattr(args, "size", "auto"))
        if args.preset == "kernelbench":
            return kernelbench_preset(**common, **({"n_seeds": args.seeds} if args.seeds is not None else {}))
        return Policy(**common, n_seeds=args.seeds if args.seeds is not None else 3, timing=TimingConfig(budget_s=args.budget_s))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _store_verdict(verdict, problem, files: dict[str, str], store: Optional[Path], main: Optional[str] = None) -> Optional[str]:
    """Keep the problem, the candidate's files (and its main file) and the verdict in the store;
    returns the verdict id."""
    from kernelwright.store import Store

    with Store.open(store) as db:
        return db.keep_verdict(problem, files, verdict, main)


def _judge(problem_spec: str, candidate: Path, policy: Policy, device: str, store: Optional[Path] = None, *,
           service: Optional[str] = None, quiet: bool = False):
    """Load the problem, read the candidate's files (what the store keeps), judge a copy of them:
    in this process, or through the service when one is named (or KERNELWRIGHT_SERVICE is set).
    Each phase goes to stderr as a line, with the seconds since the start."""
    import time

    from kernelwright.client import Judge
    from kernelwright.judge.snapshot import read_candidate
    from kernelwright.problems.loader import load_problem

    problem = load_problem(problem_spec)
    try:
        files = read_candidate(candidate)
        judge = Judge(service, device=device)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    t0 = time.perf_counter()

    def progress(message: str) -> None:
        if not quiet:
            err.print(f"{time.perf_counter() - t0:7.2f} s  {problem.name}: {message}", markup=False, highlight=False, style="dim")

    if judge.service is not None:
        progress(f"judged by the service at {judge.service}")
    try:
        verdict = judge.evaluate(problem, candidate, policy, progress=progress, baseline_store=store)
    except ProblemError:
        raise
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return problem, files, verdict


def _keep(args: argparse.Namespace, problem, files: dict[str, str], verdict, candidate: Path) -> Optional[str]:
    """Store the verdict unless asked not to; a store failure is a warning, never a lost verdict."""
    from kernelwright.judge.snapshot import main_name

    if args.no_store:
        return None
    try:
        return _store_verdict(verdict, problem, files, args.store, main_name(candidate))
    except Exception as exc:  # noqa: BLE001
        err.print(f"warning: the verdict was not stored: {type(exc).__name__}: {exc}", style="yellow", markup=False, highlight=False)
        return None


def _kept_lines(args: argparse.Namespace, ids: list[Optional[str]]) -> list[str]:
    """What _keep did with the command's verdicts, in a line (a failed store has had its warning)."""
    if args.no_store:
        return [written.not_recorded("verdict" if len(ids) == 1 else f"{len(ids)} verdicts", "--no-store")]
    kept = [i for i in ids if i]
    if not kept:
        return []
    return [written.recorded(f"verdict {kept[0]}" if len(ids) == 1 else f"{len(kept)} of {len(ids)} verdict(s)", args.store)]


def eval_cmd(args: argparse.Namespace) -> int:
    """Judge CANDIDATE against PROBLEM and print the verdict."""
    policy = policy_from_args(args)
    candidate = Path(args.candidate)
    if not candidate.exists():
        raise UsageError(f"no such candidate: {candidate}")
    problem, files, verdict = _judge(args.problem, candidate, policy, args.device, args.store, service=args.service, quiet=args.quiet)
    if args.json:
        sys.stdout.write(verdict.to_json() + "\n")
        sys.stdout.flush()
        verdict_id = _keep(args, problem, files, verdict, candidate)
    else:
        from kernelwright.report.summary import print_verdict

        verdict_id = _keep(args, problem, files, verdict, candidate)
        print_verdict(out, verdict, verdict_id)
    written.tell(_kept_lines(args, [verdict_id]))
    if args.exit_status:
        from kernelwright.workspace.exits import for_verdict

        return int(for_verdict(verdict.to_dict(), sanitized=args.sanitize))
    return 0


def _eval_epilog() -> str:
    from kernelwright.workspace.exits import EXIT_CODES, Exit

    by_status = [(Exit.OK, "correct"), (Exit.FAILURE, "infra_error: the judge itself failed; nothing is known about the candidate")]
    by_status += [(code, EXIT_CODES[code.value]) for code in (Exit.COMPILE_ERROR, Exit.INCORRECT, Exit.RUNTIME_ERROR, Exit.REJECTED)]
    by_status.append((Exit.SANITIZER, "--sanitize on a GPU: correct, but compute-sanitizer found errors"))
    return ("exit codes:\n"
            "  0  a verdict was reached, whatever its status (read it from the output, or use --exit-status)\n"
            "  1  kernelwright failed before reaching a verdict\n"
            "  2  usage: bad flags, no such candidate, a malformed problem\n"
            "with --exit-status, by the verdict's status (the codes of `kernelwright check`):\n"
            + "\n".join(f"  {int(code)}  {text}" for code, text in by_status)
            + "\n  2  usage, as above")


def demo_cmd(args: argparse.Namespace) -> int:
    """Judge the shipped example candidates (CUDA on a GPU, C++ on the CPU)."""
    from kernelwright.judge.evaluate import resolve_device
    from kernelwright.report.summary import print_table

    dev = resolve_device(args.device)
    root = Path(args.examples or EXAMPLES) / dev
    dirs = sorted(p for p in root.glob("*") if (p / "problem.py").is_file())
    if not dirs:
        raise UsageError(f"no examples under {root}")
    verdicts, ids = [], []
    for d in dirs:
        err.print(f"[bold]{d.name}[/bold] ({dev})")
        problem, files, verdict = _judge(str(d / "problem.py"), d, Policy(), dev)
        ids.append(_keep(args, problem, files, verdict, d))
        verdicts.append(verdict)
    written.tell(_kept_lines(args, ids))
    if args.json:
        sys.stdout.write(json.dumps([v.to_dict() for v in verdicts], indent=2, allow_nan=False) + "\n")
    else:
        print_table(out, verdicts)
    return 0


def problems_check_cmd(args: argparse.Namespace) -> int:
    """The degeneracy gate over one or more problems (files or folders)."""
    from kernelwright.problems.check import check_problem
    from kernelwright.problems.suite import load_suite

    problems = [e.problem for spec in args.problems for e in load_suite(spec)]
    try:
        policy = Policy(n_seeds=args.seeds, size=args.size)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
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
    from kernelwright.problems.meta import metadata_or_errors
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
    from kernelwright.problems.meta import metadata_for
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
    try:
        policy = Policy(precision=args.precision, compile_mode=args.mode, compile_baseline=not args.no_compile,
                        timing=TimingConfig(budget_s=args.budget_s), size=args.size)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
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
    table = Table(title=f"baselines on {records[0].machine.get('gpu') if records else device} ({args.precision}, torch.compile {args.mode})")
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


def old_name(p: argparse.ArgumentParser, old: str, dest: str, **kw) -> None:
    """A flag's earlier name, still accepted, not shown: each flag has one name across the commands."""
    p.add_argument(old, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kw)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="where to run (default: auto)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout and nothing else there")
    p.add_argument("--store", type=Path, default=None, help="SQLite store path (default: $KERNELWRIGHT_STORE or the user data dir)")
    p.add_argument("--no-store", action="store_true", help="do not record anything in the store")


def policy_flags(e: argparse.ArgumentParser) -> None:
    """The judging policy as flags (eval, bench); read back by policy_from_args."""
    e.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="numerics the candidate may use inside (default strict fp32): tolerances loosen to the allowance, "
                        "references stay fp32, and the baselines are timed with the same allowance (TF32 on, or autocast)")
    e.add_argument("--preset", choices=PRESETS, default=None,
                   help="kernelbench: KernelBench's settings (atol=rtol=1e-2, 5 trials on get_inputs(), 100 timed calls, no L2 flush); every guard stays on")
    e.add_argument("--seeds", type=int, default=None, help="secret seeds for correctness (default 3; 5 with --preset kernelbench)")
    e.add_argument("--baselines", default="measured", choices=BASELINE_MODES,
                   help="measure eager/compile now, take them from the store (kernelwright baseline; measured where missing), or skip")
    e.add_argument("--compile-mode", default="default", choices=COMPILE_MODES, help="torch.compile mode of the compile baseline")
    e.add_argument("--no-compile-baseline", dest="compile_baseline", action="store_false", help="do not time torch.compile")
    e.add_argument("--correctness-only", action="store_true", help="check correctness, do not time")
    e.add_argument("--allow-torch-compute", action="store_true", help="let the candidate compute with torch operators (refused by default)")
    e.add_argument("--allow-library", action="append", metavar="NAME",
                   help="let the candidate's GPU time include this library's kernels (repeatable; one of: " + ", ".join(LIBRARIES) + ")")
    e.add_argument("--timing-budget-s", dest="budget_s", type=float, default=None, help="time budget of the timing phase (default 20 s on a GPU, 5 s on a CPU)")
    old_name(e, "--budget-s", "budget_s", type=float)
    e.add_argument("--sanitize", action="store_true",
                   help="after the verdict, run one forward under compute-sanitizer (memcheck, racecheck, initcheck) and record the findings (GPU)")
    e.add_argument("--size", default="auto", choices=SIZES, help=SIZE_HELP)
    e.add_argument("--sandbox", default="auto", choices=("auto", "strict", "off"),
                   help="the sandbox generated code runs in: auto (what this machine allows; the verdict says what is missing), "
                        "strict (refuse to judge without the full sandbox), off (only the environment's allow-list)")


class _Version(argparse.Action):
    """--version: kernelwright's version, the commit of a source checkout, Python's version; no torch import."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001 - argparse's signature
        import platform

        from kernelwright import __version__
        from kernelwright.agent.exporting import git_commit

        commit = git_commit()
        where = f"source checkout at {commit}" if commit else "installed"
        sys.stdout.write(f"kernelwright {__version__} ({where}; Python {platform.python_version()})\n")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelwright", description="Write, verify and select kernels that beat PyTorch.")
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version (and the source checkout's commit) and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("eval", help="judge a candidate against a problem", epilog=_eval_epilog(),
                       description="Judge CANDIDATE against PROBLEM. The first line of the output is the verdict's status and its "
                                   "reason; the numbers and the steps not run follow.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("problem", help="a KernelBench-format .py file, builtin:NAME or kernelbench:PATH:LEVEL:ID")
    e.add_argument("candidate", help="a model_new.py file or a folder holding one")
    _common(e)
    from kernelwright.client.commands import service_flag

    service_flag(e)
    e.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    e.add_argument("--exit-status", action="store_true",
                   help="exit by the verdict's status (0 correct, 3 compile_error, 4 incorrect, 5 runtime_error or timeout, 6 rejected, "
                        "1 infra_error), as `kernelwright check` does; without it eval exits 0 whenever a verdict was reached")
    policy_flags(e)
    e.set_defaults(func=eval_cmd)
    pr = sub.add_parser("problems", help="work with problems")
    prsub = pr.add_subparsers(dest="problems_command", required=True)
    pc = prsub.add_parser("check", help="the degeneracy gate: flag problems that accept a constant, zeros, the identity or another seed's output")
    pc.add_argument("problems", nargs="+", help="problem files, folders, or suites (builtin, builtin:NAME, kernelbench:PATH[:LEVEL])")
    pc.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="where to run (default: auto)")
    pc.add_argument("--json", action="store_true", help="print the result as JSON on stdout and nothing else there")
    pc.add_argument("--seeds", type=int, default=3, help="seeds for get_inputs() (default 3, at least 2 are used)")
    pc.add_argument("--size", default="auto", choices=SIZES, help=SIZE_HELP)
    pc.set_defaults(func=problems_check_cmd)
    suite_help = "builtin (default), builtin:LEVEL, kernelbench:PATH[:LEVEL], or a problem file or folder"
    pl = prsub.add_parser("list", help="a suite's problems with computed FLOPs, bytes, floor and ceilings; counts per level and category")
    pl.add_argument("--suite", default="builtin", help=suite_help)
    pl.add_argument("--json", action="store_true", help="print a JSON list (name, level, category, flops, bytes, ...) and nothing else")
    pl.set_defaults(func=problems_list_cmd)
    ps = prsub.add_parser("show", help="one problem: its metadata and source")
    ps.add_argument("problem", help="builtin:NAME, kernelbench:PATH:LEVEL:ID, a .py file, or a NAME within --suite")
    ps.add_argument("--suite", default=None, help=suite_help)
    ps.add_argument("--json", action="store_true", help="print one JSON object and nothing else")
    ps.set_defaults(func=problems_show_cmd)
    b = sub.add_parser("baseline", help="time eager and torch.compile for a suite's problems and cache the times in the store")
    b.add_argument("--suite", default="builtin", help="builtin (default), builtin:LEVEL, kernelbench:PATH[:LEVEL], or a problem file or folder")
    b.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="where to run (default: auto)")
    b.add_argument("--compile-mode", dest="mode", default="default", choices=COMPILE_MODES, help="torch.compile mode of the compile baseline (default: default)")
    old_name(b, "--mode", "mode", choices=COMPILE_MODES)
    b.add_argument("--precision", default="fp32", choices=PRECISIONS, help="the allowance the baselines are timed with (default fp32)")
    b.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)), help="torch.compile builds at a time (timing is always serial)")
    b.add_argument("--timing-budget-s", dest="budget_s", type=float, default=None, help="time budget of each problem's timing phase (default 20 s on a GPU, 5 s on a CPU)")
    old_name(b, "--budget-s", "budget_s", type=float)
    b.add_argument("--no-compile-baseline", dest="no_compile", action="store_true", help="time eager only")
    old_name(b, "--no-compile", "no_compile", action="store_true")
    b.add_argument("--size", default="auto", choices=SIZES, help=SIZE_HELP)
    b.add_argument("--refresh", action="store_true", help="measure again even where the store holds times for this machine")
    b.add_argument("--json", action="store_true", help="print the records and per-level ratios as JSON and nothing else on stdout")
    b.add_argument("--store", type=Path, default=None, help="SQLite store path (default: $KERNELWRIGHT_STORE or the user data dir)")
    b.set_defaults(func=baseline_cmd)
    d = sub.add_parser("demo", help="judge the shipped example candidates")
    _common(d)
    d.add_argument("--examples", default=None, help="folder of examples (default: the repo's examples/)")
    d.set_defaults(func=demo_cmd)
    from kernelwright.agent.commands import add_parsers

    add_parsers(sub)  # optimize, resume, review, runs
    from kernelwright.report.commands import add_parsers as add_report_parsers

    add_report_parsers(sub)  # bench, report, compare
    from kernelwright.workspace.commands import add_parsers as add_workspace_parsers

    add_workspace_parsers(sub)  # workspace, check
    from kernelwright.workspace.mcp_cli import add_parser as add_mcp_parser

    add_mcp_parser(sub)  # mcp
    from kernelwright.synth.commands import add_parsers as add_synth_parsers

    add_synth_parsers(sub)  # synth
    from kernelwright.client.commands import add_parser as add_serve_parser

    add_serve_parser(sub)  # serve
    return parser


def main(argv: Optional[list[str]] = None) -> None:
    level = os.environ.get("KERNELWRIGHT_LOG", "WARNING").upper()
    logging.basicConfig(level=getattr(logging, level, logging.WARNING), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)  # exits 2 on usage errors
    store = written.store_path(getattr(args, "store", None)) if hasattr(args, "store") else None
    fresh = store is not None and not store.exists()
    try:
        if args.func is not eval_cmd:  # eval hands its --service to the client itself
            from kernelwright.client.commands import use_service

            try:
                use_service(args)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        sys.exit(args.func(args))
    except ProblemError as exc:
        err.print(f"malformed problem: {exc}", highlight=False, markup=False, style="red")
        sys.exit(2)
    except UsageError as exc:
        err.print(f"usage error: {exc}", highlight=False, markup=False, style="red")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - a last resort with a clear message and exit code 1
        err.print(f"error: {type(exc).__name__}: {exc}", highlight=False, markup=False, style="red")
        sys.exit(1)
    finally:
        if fresh and store.exists():  # any command that opens the store creates it: say so once
            written.tell([written.wrote(store, "a new store: it did not exist before this command")])


if __name__ == "__main__":
    main()
