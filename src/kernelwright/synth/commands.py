"""`kernelwright synth`: compose, filter, decontaminate and export training tasks. The summary goes
to stdout (a table, or the report as JSON with --json); the progress bar to stderr."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rich.table import Table

from kernelwright.errors import UsageError
from kernelwright.flags import add_policy_flags, device_flag, json_flag, old_name, policy_from_args


def _weights(text: str | None) -> dict[int, float] | None:
    """'1:0.1,2:0.5,3:0.2,4:0.1,5:0.1' -> {1: 0.1, ...}"""
    if not text:
        return None
    try:
        return {int(k): float(v) for k, v in (part.split(":") for part in text.split(","))}
    except ValueError:
        raise UsageError(f"--op-weights takes COUNT:WEIGHT pairs separated by commas, got {text!r}") from None


GPU_WORKERS = 4  # checking workers sharing one GPU: the H200 run lost a third of 200 tasks to out-of-memory at 5 (each retried alone)


def default_workers(device: str) -> int:
    cpus = max(1, os.cpu_count() or 1)
    return min(cpus, GPU_WORKERS) if device == "cuda" else cpus


def synth_cmd(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kernelwright.console import err, out
    from kernelwright.judge.evaluate import resolve_device
    from kernelwright.synth.pipeline import SynthConfig, run_synth, written_lines
    from kernelwright.written import tell

    if args.source and not (Path(args.source) / "tasks.jsonl").is_file():
        raise UsageError(f"--from needs a synthesis folder with tasks.jsonl, got {args.source}")
    try:
        device = resolve_device(args.device)
        config = SynthConfig(n=args.n, out=Path(args.out or f"synth-s{args.seed}"), seed=args.seed, device=device,
                             workers=args.workers or default_workers(device), window_ms=tuple(args.window_ms),
                             against=tuple(args.against or ['builtin']), threshold=args.threshold, dedup_threshold=args.dedup_threshold,
                             weights=_weights(args.op_weights), backend=args.compile_backend, timeout_s=args.timeout_s,
                             max_candidates=args.max_candidates, source=Path(args.source) if args.source else None,
                             composer=args.composer_model or "rules", resume=args.resume, sandbox=policy_from_args(args).sandbox)
    except (ValueError, RuntimeError) as exc:
        raise UsageError(str(exc)) from None
    composer = None
    if args.composer_model:
        from kernelwright.llm.backend import make_backend
        from kernelwright.synth.llm_composer import LLMComposer

        if args.source:
            raise UsageError("--model composes new tasks; it cannot be combined with --from")
        try:
            composer = LLMComposer(make_backend(args.composer_model, base_url=args.base_url), window_ms=config.window_ms)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=False)
    bar = progress.add_task("accepted", total=config.n)

    def on_progress(event: dict[str, Any]) -> None:
        progress.update(bar, completed=event["accepted"], description=f"accepted ({event['examined']} candidates examined)")

    with progress:
        try:
            report = run_synth(config, on_progress, composer)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.json:
        out.print_json(json.dumps(report, default=str))
        tell(written_lines(report, config.out))
        return 0 if report["n_accepted"] >= config.n else 1
    out.print(stage_table(report))
    out.print(f"{report['n_accepted']} of {config.n} tasks in {report['wall_s']} s from {report['n_candidates']} candidates; "
              f"operators per task {report['n_ops_histogram']}; {report['decontamination']['n_contaminated']} contaminated "
              f"(threshold {config.threshold})", markup=False, highlight=False)
    tell(written_lines(report, config.out))
    return 0 if report["n_accepted"] >= config.n else 1


def stage_table(report: dict[str, Any]) -> Table:
    table = Table(title="filters, in order")
    for col in ("stage", "entered", "passed", "acceptance", "worker s"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for s in report["stages"]:
        table.add_row(s["stage"], str(s["entered"]), str(s["passed"]), "-" if s["acceptance"] is None else f"{s['acceptance']:.1%}", f"{s['worker_seconds']:.1f}")
    return table


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("synth", help="compose PyTorch operators into verified, decontaminated training tasks (KernelBench files, JSONL, Parquet)")
    s.add_argument("--n", type=int, default=100, help="tasks to accept (default 100)")
    s.add_argument("--out", default=None, help="the run's folder (default synth-sSEED)")
    s.add_argument("--seed", type=int, default=0)
    device_flag(s, help="auto (default), cpu (small-scale checks, runtime proxy) or cuda (full size, inductor, measured eager time)")
    s.add_argument("--workers", type=int, default=None, help="worker processes (default: one per CPU core; at most 4 on a GPU, which they share)")
    s.add_argument("--window-ms", type=float, nargs=2, default=[1.0, 100.0], metavar=("LOW", "HIGH"), help="eager runtime window on the H200 (default 1 100)")
    s.add_argument("--against", action="append", default=None, help="suite (builtin, kernelbench:PATH) or folder to decontaminate against; repeatable (default builtin)")
    s.add_argument("--threshold", type=float, default=0.9, help="AST similarity that counts as contamination (default 0.9)")
    s.add_argument("--dedup-threshold", type=float, default=1.0, help="AST similarity that counts as a duplicate (default 1.0: the same program up to numbers and names)")
    s.add_argument("--op-weights", default=None, help="operator-count weights, e.g. 1:0.1,2:0.4,3:0.3,4:0.1,5:0.1")
    s.add_argument("--compile-backend", default=None, help="torch.compile backend (default aot_eager on cpu, inductor on cuda)")
    s.add_argument("--timeout-s", type=float, default=300.0, help="seconds per candidate before its worker is replaced")
    s.add_argument("--max-candidates", type=int, default=None, help="give up after this many candidates (default 20 n + 100)")
    s.add_argument("--from", dest="source", default=None, help="filter an exported set (a synth folder) again instead of composing, e.g. on a GPU")
    s.add_argument("--model", dest="composer_model", default=None, help="PROVIDER:MODEL: an LLM writes each candidate's program from the drawn operators (default: the rule composer)")
    old_name(s, "--composer-model", "composer_model")  # the earlier name of --model
    s.add_argument("--base-url", default=None, help="the composer model's server (OpenAI-compatible)")
    s.add_argument("--resume", action="store_true", help="continue the run in --out")
    add_policy_flags(s, only=("sandbox",))  # of the workers that run composed task code
    json_flag(s)
    s.set_defaults(func=synth_cmd)
