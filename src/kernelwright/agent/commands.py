"""The agent's commands: `optimize`, `resume`, `review` and `runs list|show`.

Results on stdout (a readable summary, or JSON with --json); live progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kernelwright import written
from kernelwright.agent.objective import LANGUAGES, STRATEGIES, load_config, merge
from kernelwright.core.runs import StepKind
from kernelwright.agent.transcript import CLIP
from kernelwright.client.commands import pool_flags, service_flag
from kernelwright.flags import add_policy_flags, device_flag, json_flag, policy_settings, store_flag
from kernelwright.problems.loader import ProblemError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# The demo's problem under examples/DEVICE/ for each device, and its recording examples/recordings/DEVICE_PROBLEM.json.
# On a CPU: a chain of elementwise operators, where one fused C++ loop can honestly beat eager torch.
DEMO_PROBLEMS = {"cpu": "elementwise_chain", "cuda": "softmax"}
CPU_DEMO_SENTENCE = ("This was a CPU run: it shows the whole loop (the model's recorded turns, every candidate built, checked "
                     "against the reference and timed beside eager torch and torch.compile on this machine). CPU times are "
                     "this machine's only, never claims; the GPU speedups kernelwright is for need a CUDA device.")

# what a replay takes from the recording's objective (never the judging rules: tolerances, precision, libraries...)
SEARCH_SETTINGS = ("strategy", "rounds", "branches", "ideas", "max_turns", "target_speedup", "stuck_after", "max_failures", "language")

# flag name -> objective field, for the agent's own settings (the judging policy's flags come from its declaration)
OBJECTIVE_FLAGS = {
    "strategy": "strategy", "rounds": "rounds", "branches": "branches", "ideas": "ideas", "max_turns": "max_turns",
    "budget_tokens": "budget_tokens", "budget_minutes": "budget_minutes", "target_speedup": "target_speedup",
    "stuck_after": "stuck_after", "max_failures": "max_failures", "price_in": "price_in_per_mtok",
    "price_out": "price_out_per_mtok", "parallel_builds": "parallel_builds", "language": "language",
}


def _usage(message: str) -> Exception:
    from kernelwright.errors import UsageError

    return UsageError(message)


def objective_flags(args: argparse.Namespace) -> dict[str, Any]:
    """Objective settings given on the command line (None: not given); shared with `workspace init`."""
    flags = {field: getattr(args, flag, None) for flag, field in OBJECTIVE_FLAGS.items()}
    flags.update(policy_settings(args))
    if getattr(args, "no_sanitize", False):
        flags["sanitize_final"] = False
    return flags


def _demo(args: argparse.Namespace) -> tuple[str, str]:
    """The demo's problem and replay recording for the device found (with --language triton, the
    recording whose kernels are Triton's: examples/recordings/DEVICE_PROBLEM_triton.json)."""
    import importlib.util

    from kernelwright.judge.evaluate import resolve_device

    dev = resolve_device(args.device)
    language = getattr(args, "language", None)
    if language is None and getattr(args, "config", None):  # a config file's language chooses the recording too
        try:
            language = load_config(args.config).get("language")
        except ValueError as exc:
            raise _usage(str(exc)) from None
    triton = language == "triton"
    if triton and importlib.util.find_spec("triton") is None:
        raise _usage("the Triton demo needs Triton: pip install triton (the test extra has it)")
    recording = EXAMPLES / "recordings" / f"{dev}_{DEMO_PROBLEMS[dev]}{'_triton' if triton else ''}.json"
    problem = EXAMPLES / dev / DEMO_PROBLEMS[dev] / "problem.py"
    if not recording.is_file() or not problem.is_file():
        raise _usage(f"the demo needs {recording} and {problem} (a source checkout)")
    return str(problem), f"replay:{recording}"


def _objective(args: argparse.Namespace, model: str) -> Any:
    """Recording (replays) < config file < flags."""
    from kernelwright.agent.replay import load_recording

    base: dict[str, Any] = {}
    try:
        if model.startswith("replay:"):  # the recording's search settings only: the judging rules come from flags and defaults
            recorded = load_recording(model[len("replay:"):]).get("objective") or {}
            base.update({k: v for k, v in recorded.items() if k in SEARCH_SETTINGS})
        if args.config:
            base.update(load_config(args.config))
        return merge(base, objective_flags(args))
    except ValueError as exc:
        raise _usage(str(exc)) from None


def optimize_cmd(args: argparse.Namespace) -> int:
    """Start a run; print how it ended."""
    from kernelwright.agent import optimize

    problem, model = _demo(args) if args.demo else (args.problem, args.model)
    if not problem or not model:
        raise _usage("optimize needs PROBLEM and --model PROVIDER:MODEL (or --demo)")
    objective = _objective(args, model)
    pool = _pool(args, objective, args.device)
    req = optimize.RunRequest(problem_spec=problem, model=model, objective=objective, base_url=args.base_url, device=args.device,
                              out_dir=args.out, store=args.store, timeout_s=args.timeout_s, pool=pool,
                              note=args.note or ("demo: replay of a recording shipped in examples/recordings" if args.demo else ""))
    try:
        result = optimize.start(req, progress=_progress(args))
    except ProblemError:
        raise
    except ValueError as exc:
        raise _usage(str(exc)) from None
    return _report(args, result)


def _pool(args: argparse.Namespace, objective: Any, device: str) -> Any:
    """A function making the judge's pool that --ray / --pool ask for (client.pool), or None. The
    run calls it once the rest of the request checks out; what a pool cannot do is refused here,
    before any worker starts."""
    from kernelwright.client.commands import check_pool_args, pool_from_args, pool_wanted

    if not pool_wanted(args):
        return None
    try:
        check_pool_args(args, objective.policy() if objective is not None else None)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    return lambda: pool_from_args(args, device)


def resume_cmd(args: argparse.Namespace) -> int:
    """Continue a paused (or interrupted) run with a hint or an engineer's candidate; a finished one only with --again."""
    from kernelwright.agent import optimize

    changes = {k: v for k, v in objective_flags(args).items() if v is not None}
    from kernelwright.client.commands import pool_wanted

    pool = None
    if pool_wanted(args):
        try:  # the pool on the device the run started on
            pool = _pool(args, None, optimize.run_device(args.run, args.store))
        except (KeyError, ValueError) as exc:
            raise _usage(str(exc).strip("'\"")) from None
    try:
        result = optimize.resume(args.run, hint=args.hint, candidate=args.candidate, store=args.store, model=args.model,
                                 base_url=args.base_url, changes=changes, progress=_progress(args), force=args.force, out_dir=args.out,
                                 again=args.again, pool=pool)
    except ProblemError:
        raise
    except (KeyError, ValueError) as exc:
        raise _usage(str(exc).strip("'\"")) from None
    return _report(args, result)


def _progress(args: argparse.Namespace) -> Any:
    from kernelwright.console import err

    return lambda message: err.print(message, markup=False, highlight=False, style="dim")


def _report(args: argparse.Namespace, result: Any) -> int:
    from kernelwright.console import out

    data = {"run_id": result.run_id, "status": result.status.value, "summary": result.summary,
            "out_dir": str(result.out_dir) if result.out_dir else None, "final_verdict": result.final}
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
        written.tell(_written_lines(args, result))
        return 0
    out.print(f"[bold]{result.run_id}[/bold]  {result.status.value}", highlight=False)
    out.print(result.summary, markup=False, highlight=False)
    if result.final:
        from kernelwright.core.records import Verdict
        from kernelwright.report.summary import print_verdict

        print_verdict(out, Verdict.from_dict(result.final))
    if not result.out_dir and result.final:
        out.print("nothing exported: see the summary above", markup=False, highlight=False)
    if getattr(args, "demo", False) and (result.final or {}).get("policy", {}).get("device") == "cpu":
        out.print(CPU_DEMO_SENTENCE, markup=False, highlight=False)
    written.tell(_written_lines(args, result))
    return 0


def _written_lines(args: argparse.Namespace, result: Any) -> list[str]:
    """The run's rows in the store, and the export's files (on stderr, --json or not)."""
    lines = [written.recorded(f"run {result.run_id} (its steps, candidates and verdicts)", getattr(args, "store", None))]
    if result.out_dir:
        lines.append(f"exported to {result.out_dir}: {', '.join(written.files_in(result.out_dir)) or 'no files'}")
    return lines


def _run_and_steps(db: Any, ref: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run by id or unique prefix, and its steps; a usage error names what is wrong."""
    try:
        run = db.get_run(ref)
    except (KeyError, ValueError) as exc:
        raise _usage(str(exc).strip("'\"")) from None
    return run, db.run_steps(run["id"])


def _print_run_json(run: dict[str, Any], steps: list[dict[str, Any]]) -> None:
    from kernelwright.agent import history

    sys.stdout.write(json.dumps(history.run_json(run, steps), indent=2, allow_nan=False) + "\n")


def review_cmd(args: argparse.Namespace) -> int:
    """Show a run's evidence; record approve / reject with a note."""
    from kernelwright.agent import exporting, history
    from kernelwright.console import out
    from kernelwright.store import Store

    decided = args.approve or args.reject
    with Store.open(args.store) as db:
        run, steps = _run_and_steps(db, args.run)
        if decided:
            db.review_run(run["id"], approved=bool(args.approve), note=args.note or "")
            exported = exporting.review(run, approved=bool(args.approve), note=args.note or "")
            run, steps = _run_and_steps(db, run["id"])
    if args.json:
        _print_run_json(run, steps)
    else:
        out.print(history.evidence(run, steps), markup=False, highlight=False)
    if decided:
        verdict = "approved" if args.approve else "rejected"
        written.tell([written.recorded(f"the review of run {run['id']} ({verdict}" + (f": {args.note})" if args.note else ")"), args.store),
                      written.wrote_in(exported, ["run.json", "SUMMARY.md"]) + " (the review)" if exported
                      else written.skipped("the export's review", "this run has no export to update")])
    return 0


def runs_list_cmd(args: argparse.Namespace) -> int:
    from kernelwright.agent import history
    from kernelwright.console import out
    from kernelwright.store import Store

    with Store.open(args.store) as db:
        runs = db.list_runs(status=args.status, limit=args.limit)
        for run in runs:  # the exported candidate's re-judged figures, beside the search's best
            run["export"] = history.exported(db.run_steps(run["id"], kinds=(StepKind.EXPORT, StepKind.FINAL)))
    if args.json:
        sys.stdout.write(json.dumps(runs, indent=2, allow_nan=False) + "\n")
    else:
        history.print_runs(out, runs)
    return 0


def runs_show_cmd(args: argparse.Namespace) -> int:
    from kernelwright.agent import history
    from kernelwright.console import out
    from kernelwright.store import Store

    with Store.open(args.store) as db:
        run, steps = _run_and_steps(db, args.run)
    if args.json:
        _print_run_json(run, steps)
    else:
        history.print_run(out, run, steps, limit=None if args.full else history.CLIP)
    return 0


# -- parsers ------------------------------------------------------------------------------------------


def _store_flag(p: argparse.ArgumentParser) -> None:
    store_flag(p)
    json_flag(p)


def _objective_flags(p: argparse.ArgumentParser, *, full: bool) -> None:
    """Objective flags; every default is None so a config file or a recording can set it."""
    p.add_argument("--target-speedup", type=float, help="stop once a re-judged candidate is this much faster than the faster of eager and torch.compile")
    p.add_argument("--budget-tokens", type=int, help="stop when prompt + completion tokens reach this")
    p.add_argument("--budget-minutes", type=float, help="stop after this many minutes (over all resumes)")
    p.add_argument("--max-turns", type=int, help="refine: model requests in all (default 40); tree / best-of-n: per branch")
    p.add_argument("--rounds", type=int, help="tree: idea rounds (default 5)")
    p.add_argument("--stuck-after", type=int, help="pause after this many judged candidates (tree: rounds) without gain (default 4)")
    p.add_argument("--max-failures", type=int, help="pause after this many failed turns in a row (default 4)")
    if not full:
        return
    p.add_argument("--language", choices=LANGUAGES, help="what the model writes kernels in: cuda (default; C++ on the CPU backend) or triton")
    p.add_argument("--strategy", choices=STRATEGIES, help="refine (default): one multi-turn trajectory; tree: ideas, K implementations each, a bank; best-of-n")
    p.add_argument("--branches", type=int, help="tree: implementations per idea; best-of-n: attempts (default 4)")
    p.add_argument("--ideas", type=int, help="tree: ideas per round (default 2)")
    add_policy_flags(p, objective=True)  # the judging rules
    p.add_argument("--price-in", type=float, help="USD per million prompt tokens (cost accounting when the server reports none)")
    p.add_argument("--price-out", type=float, help="USD per million completion tokens")
    p.add_argument("--parallel-builds", type=int, help="candidates built at once on the CPU (default 4)")
    p.add_argument("--no-sanitize", action="store_true", help="skip compute-sanitizer in the final re-judge (GPU)")


def add_parsers(sub: Any) -> None:
    """Register the agent's commands on the CLI's subparsers."""
    o = sub.add_parser("optimize", help="an LLM writes, tests and improves kernels for a problem until they beat eager and torch.compile")
    o.add_argument("problem", nargs="?", help="a KernelBench-format .py file, builtin:NAME or kernelbench:PATH:LEVEL:ID")
    o.add_argument("--model", help="PROVIDER:MODEL: openai:NAME (any OpenAI-compatible server), anthropic:NAME, or replay:FILE")
    o.add_argument("--base-url", help="the server's URL (vLLM, SGLang, Ollama, a gateway); keys come only from OPENAI_API_KEY, ANTHROPIC_API_KEY or KERNELWRIGHT_API_KEY")
    device_flag(o, help="where candidates are judged (default: auto)")
    service_flag(o)
    pool_flags(o)
    o.add_argument("--out", type=Path, default=None, help="where the winner goes as a drop-in package (default: runs/RUN_ID beside the store)")
    o.add_argument("--config", type=Path, help="a run config file (JSON or TOML) with objective settings; flags win over it")
    o.add_argument("--timeout-s", type=float, default=600.0, help="per model request (default 600 s)")
    o.add_argument("--note", default="", help="provenance in words, kept with the run and its export")
    o.add_argument("--demo", action="store_true", help="replay the recording shipped for this device's example (elementwise_chain on a CPU, softmax on CUDA; "
                   "with --language triton, its Triton recording); every candidate is judged again")
    _objective_flags(o, full=True)
    _store_flag(o)
    o.set_defaults(func=optimize_cmd)
    r = sub.add_parser("resume", help="continue a paused run with a hint or an engineer's candidate")
    r.add_argument("run", help="run id (a unique prefix will do)")
    r.add_argument("--hint", help="words for the model's next request")
    r.add_argument("--candidate", type=Path, help="an engineer's own candidate (model_new.py or its folder): judged, counted, and handed to the model")
    r.add_argument("--model", help="continue with another PROVIDER:MODEL")
    r.add_argument("--base-url", help="the server's URL, when it moved")
    r.add_argument("--out", type=Path, default=None, help="export to this folder instead of the run's earlier one")
    r.add_argument("--force", action="store_true", help="resume a run still marked running (its process was killed outright)")
    r.add_argument("--again", action="store_true", help="continue a run that already finished: search, re-judge and export again "
                                                        "(beside the earlier export, which keeps its review)")
    pool_flags(r)
    _objective_flags(r, full=False)
    _store_flag(r)
    r.set_defaults(func=resume_cmd)
    v = sub.add_parser("review", help="a run's evidence; --approve or --reject records the decision")
    v.add_argument("run", help="run id (a unique prefix will do)")
    group = v.add_mutually_exclusive_group()
    group.add_argument("--approve", action="store_true", help="approve the exported candidate")
    group.add_argument("--reject", action="store_true", help="reject it")
    v.add_argument("--note", default="", help="why")
    _store_flag(v)
    v.set_defaults(func=review_cmd)
    rs = sub.add_parser("runs", help="optimisation runs in the store")
    rsub = rs.add_subparsers(dest="runs_command", required=True)
    rl = rsub.add_parser("list", help="runs, newest first")
    rl.add_argument("--status", default=None, help="only runs with this status")
    rl.add_argument("--limit", type=int, default=50)
    _store_flag(rl)
    rl.set_defaults(func=runs_list_cmd)
    rw = rsub.add_parser("show", help="one run: objective, prompts, replies, tool calls, judged candidates, export, pauses, hints, reviews, totals")
    rw.add_argument("run", help="run id (a unique prefix will do)")
    rw.add_argument("--full", action="store_true", help=f"print every prompt, reply and tool result whole (default: each cut at {CLIP} characters)")
    _store_flag(rw)
    rw.set_defaults(func=runs_show_cmd)
