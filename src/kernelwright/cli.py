"""The kernelwright command line (argparse). Results on stdout; progress and logs on stderr.

Exit codes: 0 when the command did its job (an eval that reached any verdict), 2 for usage errors
and malformed inputs, 1 for other failures.
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

from kernelwright.judge.policy import BASELINE_MODES, PRECISIONS, PRESETS, Policy, TimingConfig, kernelbench_preset
from kernelwright.judge.provenance import LIBRARIES
from kernelwright.problems.loader import ProblemError

out = Console(width=None if sys.stdout.isatty() else 160)  # tables unwrapped when piped
err = Console(stderr=True)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class UsageError(ValueError):
    """Bad command-line input (exit code 2)."""


def _policy(args: argparse.Namespace) -> Policy:
    if args.baselines == "cached":
        raise UsageError("cached baselines need the baseline cache, which is not built yet; use measured or skip")
    try:
        common = dict(precision=args.precision, baselines=args.baselines, compile_baseline=args.compile_baseline and args.baselines == "measured",
                      time_candidate=not args.correctness_only, allow_torch_compute=args.allow_torch_compute,
                      libraries=tuple(args.allow_library or ()), sanitize=args.sanitize)
        if args.preset == "kernelbench":
            return kernelbench_preset(**common, **({"n_seeds": args.seeds} if args.seeds is not None else {}))
        return Policy(**common, n_seeds=args.seeds if args.seeds is not None else 3, timing=TimingConfig(budget_s=args.budget_s))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _store_verdict(verdict, problem, files: dict[str, str], store: Optional[Path]) -> Optional[str]:
    """Keep the problem, the candidate's files and the verdict in the store; returns the verdict id."""
    from kernelwright.store import Store

    with Store.open(store) as db:
        db.put_problem(problem.hash, problem.name, str(problem.path), problem.source)
        if verdict.candidate.get("hash"):
            db.put_candidate(verdict.candidate["hash"], verdict.candidate["build_path"], files)
            return db.put_verdict(verdict)
    return None


def _judge(problem_spec: str, candidate: Path, policy: Policy, device: str):
    """Load the problem, read the candidate's files (what the store keeps), judge a copy of them."""
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.snapshot import read_candidate
    from kernelwright.problems.loader import load_problem

    problem = load_problem(problem_spec)
    try:
        files = read_candidate(candidate)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    with err.status(f"judging {candidate} on {problem.name}") as status:
        verdict = evaluate(problem, candidate, policy, device=device, progress=lambda m: status.update(f"{problem.name}: {m}"))
    return problem, files, verdict


def _keep(args: argparse.Namespace, problem, files: dict[str, str], verdict) -> Optional[str]:
    """Store the verdict unless asked not to; a store failure is a warning, never a lost verdict."""
    if args.no_store:
        return None
    try:
        return _store_verdict(verdict, problem, files, args.store)
    except Exception as exc:  # noqa: BLE001
        err.print(f"warning: the verdict was not stored: {type(exc).__name__}: {exc}", style="yellow", markup=False, highlight=False)
        return None


def eval_cmd(args: argparse.Namespace) -> int:
    """Judge CANDIDATE against PROBLEM and print the verdict."""
    policy = _policy(args)
    candidate = Path(args.candidate)
    if not candidate.exists():
        raise UsageError(f"no such candidate: {candidate}")
    problem, files, verdict = _judge(args.problem, candidate, policy, args.device)
    if args.json:
        sys.stdout.write(verdict.to_json() + "\n")
        sys.stdout.flush()
        _keep(args, problem, files, verdict)
    else:
        from kernelwright.report.summary import print_verdict

        print_verdict(out, verdict, _keep(args, problem, files, verdict))
    return 0


def demo_cmd(args: argparse.Namespace) -> int:
    """Judge the shipped example candidates (CUDA on a GPU, C++ on the CPU)."""
    from kernelwright.judge.evaluate import resolve_device
    from kernelwright.report.summary import print_table

    dev = resolve_device(args.device)
    root = Path(args.examples or EXAMPLES) / dev
    dirs = sorted(p for p in root.glob("*") if (p / "problem.py").is_file())
    if not dirs:
        raise UsageError(f"no examples under {root}")
    verdicts = []
    for d in dirs:
        err.print(f"[bold]{d.name}[/bold] ({dev})")
        problem, files, verdict = _judge(str(d / "problem.py"), d, Policy(), dev)
        _keep(args, problem, files, verdict)
        verdicts.append(verdict)
    if args.json:
        sys.stdout.write(json.dumps([v.to_dict() for v in verdicts], indent=2, allow_nan=False) + "\n")
    else:
        print_table(out, verdicts)
    return 0


def problems_check_cmd(args: argparse.Namespace) -> int:
    """The degeneracy gate over one or more problems (files or folders)."""
    from kernelwright.problems.check import check_problem
    from kernelwright.problems.loader import load_problems

    problems = [p for spec in args.problems for p in load_problems(spec)]
    try:
        policy = Policy(n_seeds=args.seeds)
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


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="where to run (default: auto)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout and nothing else there")
    p.add_argument("--store", type=Path, default=None, help="SQLite store path (default: $KERNELWRIGHT_STORE or the user data dir)")
    p.add_argument("--no-store", action="store_true", help="do not record anything in the store")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelwright", description="Write, verify and select kernels that beat PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("eval", help="judge a candidate against a problem")
    e.add_argument("problem", help="a KernelBench-format .py file")
    e.add_argument("candidate", help="a model_new.py file or a folder holding one")
    _common(e)
    e.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="numerics the candidate may use inside (default strict fp32): tolerances loosen to the allowance, "
                        "references stay fp32, and the baselines are timed with the same allowance (TF32 on, or autocast)")
    e.add_argument("--preset", choices=PRESETS, default=None,
                   help="kernelbench: KernelBench's settings (atol=rtol=1e-2, 5 trials on get_inputs(), 100 timed calls, no L2 flush); every guard stays on")
    e.add_argument("--seeds", type=int, default=None, help="secret seeds for correctness (default 3; 5 with --preset kernelbench)")
    e.add_argument("--baselines", default="measured", choices=BASELINE_MODES, help="measure eager/compile now, or skip")
    e.add_argument("--no-compile-baseline", dest="compile_baseline", action="store_false", help="do not time torch.compile")
    e.add_argument("--correctness-only", action="store_true", help="check correctness, do not time")
    e.add_argument("--allow-torch-compute", action="store_true", help="let the candidate compute with torch operators (refused by default)")
    e.add_argument("--allow-library", action="append", metavar="NAME",
                   help="let the candidate's GPU time include this library's kernels (repeatable; one of: " + ", ".join(LIBRARIES) + ")")
    e.add_argument("--budget-s", type=float, default=20.0, help="time budget of the timing phase (default 20 s)")
    e.add_argument("--sanitize", action="store_true",
                   help="after the verdict, run one forward under compute-sanitizer (memcheck, racecheck, initcheck) and record the findings (GPU)")
    e.set_defaults(func=eval_cmd)
    pr = sub.add_parser("problems", help="work with problems")
    prsub = pr.add_subparsers(dest="problems_command", required=True)
    pc = prsub.add_parser("check", help="the degeneracy gate: flag problems that accept a constant, zeros, the identity or another seed's output")
    pc.add_argument("problems", nargs="+", help="problem files or folders of them")
    pc.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="where to run (default: auto)")
    pc.add_argument("--json", action="store_true", help="print the result as JSON on stdout and nothing else there")
    pc.add_argument("--seeds", type=int, default=3, help="seeds for get_inputs() (default 3, at least 2 are used)")
    pc.set_defaults(func=problems_check_cmd)
    d = sub.add_parser("demo", help="judge the shipped example candidates")
    _common(d)
    d.add_argument("--examples", default=None, help="folder of examples (default: the repo's examples/)")
    d.set_defaults(func=demo_cmd)
    return parser


def main(argv: Optional[list[str]] = None) -> None:
    level = os.environ.get("KERNELWRIGHT_LOG", "WARNING").upper()
    logging.basicConfig(level=getattr(logging, level, logging.WARNING), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)  # exits 2 on usage errors
    try:
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


if __name__ == "__main__":
    main()
