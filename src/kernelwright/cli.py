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

from kernelwright import written
from kernelwright.console import err, out
from kernelwright.problems.commands import baseline_cmd, problems_check_cmd, problems_list_cmd, problems_show_cmd
from kernelwright.flags import add_policy_flags, common_flags, device_flag, json_flag, policy_from_args, store_flag
from kernelwright.judge.policy import Policy
from kernelwright.problems.loader import ProblemError


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


from kernelwright.errors import UsageError  # noqa: E402 - one class for `-m kernelwright.cli` and imports


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
    common_flags(e)
    from kernelwright.client.commands import service_flag

    service_flag(e)
    e.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    e.add_argument("--exit-status", action="store_true",
                   help="exit by the verdict's status (0 correct, 3 compile_error, 4 incorrect, 5 runtime_error or timeout, 6 rejected, "
                        "1 infra_error), as `kernelwright check` does; without it eval exits 0 whenever a verdict was reached")
    add_policy_flags(e)
    e.set_defaults(func=eval_cmd)
    pr = sub.add_parser("problems", help="work with problems")
    prsub = pr.add_subparsers(dest="problems_command", required=True)
    pc = prsub.add_parser("check", help="the degeneracy gate: flag problems that accept a constant, zeros, the identity or another seed's output",
                          description="The degeneracy gate: flag problems that accept a constant, zeros, the identity or another "
                                      "seed's output. --seeds draws get_inputs() (at least 2 are used).")
    pc.add_argument("problems", nargs="+", help="problem files, folders, or suites (builtin, builtin:NAME, kernelbench:PATH[:LEVEL])")
    device_flag(pc)
    json_flag(pc)
    add_policy_flags(pc, only=("seeds", "size"))
    pc.set_defaults(func=problems_check_cmd)
    suite_help = "builtin (default), builtin:LEVEL, kernelbench:PATH[:LEVEL], or a problem file or folder"
    pl = prsub.add_parser("list", help="a suite's problems with computed FLOPs, bytes, floor and ceilings; counts per level and category")
    pl.add_argument("--suite", default="builtin", help=suite_help)
    json_flag(pl, help="print a JSON list (name, level, category, flops, bytes, ...) and nothing else")
    pl.set_defaults(func=problems_list_cmd)
    ps = prsub.add_parser("show", help="one problem: its metadata and source")
    ps.add_argument("problem", help="builtin:NAME, kernelbench:PATH:LEVEL:ID, a .py file, or a NAME within --suite")
    ps.add_argument("--suite", default=None, help=suite_help)
    json_flag(ps, help="print one JSON object and nothing else")
    ps.set_defaults(func=problems_show_cmd)
    b = sub.add_parser("baseline", help="time eager and torch.compile for a suite's problems and cache the times in the store")
    b.add_argument("--suite", default="builtin", help="builtin (default), builtin:LEVEL, kernelbench:PATH[:LEVEL], or a problem file or folder")
    device_flag(b)
    b.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)), help="torch.compile builds at a time (timing is always serial)")
    add_policy_flags(b, only=("precision", "compile_mode", "compile_baseline", "timing_budget_s", "size"))  # what the baselines are timed with
    b.add_argument("--refresh", action="store_true", help="measure again even where the store holds times for this machine")
    json_flag(b, help="print the records and per-level ratios as JSON and nothing else on stdout")
    store_flag(b)
    b.set_defaults(func=baseline_cmd)
    d = sub.add_parser("demo", help="judge the shipped example candidates")
    common_flags(d)
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
    from kernelwright.rl.commands import add_parsers as add_rl_parsers

    add_rl_parsers(sub)  # rl rollout
    from kernelwright.client.commands import add_parser as add_serve_parser

    add_serve_parser(sub)  # serve
    from kernelwright.judge.commands import add_parsers as add_cache_parsers

    add_cache_parsers(sub)  # cache show, cache prune
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
