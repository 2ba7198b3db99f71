"""`kernelwright rl rollout`: episodes of a model against the RL environment, recorded in OUT and
in the store; `kernelwright rl export-sft`: the good episodes as chat-format training data;
`kernelwright rl export-verl`: tasks as verl's parquet rows with the tools' and the agent loop's
config files. The summary goes to stdout (JSON with --json); the progress to stderr."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelwright.agent.objective import LANGUAGES
from kernelwright.client.commands import pool_flags
from kernelwright.errors import UsageError
from kernelwright.flags import add_policy_flags, device_flag, json_flag, policy_settings, store_flag

SPLITS = ("train", "test", "all")


def _env_config(args: argparse.Namespace) -> Any:
    from kernelwright.agent.objective import load_config, merge
    from kernelwright.rl.env import EnvConfig
    from kernelwright.rl.reward import RewardConfig

    flags = {"max_turns": args.max_turns, "budget_tokens": args.budget_tokens, "budget_minutes": args.budget_minutes,
             "target_speedup": args.target_speedup, "language": args.language, **policy_settings(args)}
    try:
        objective = merge(load_config(args.config) if args.config else {}, flags)
        reward = RewardConfig(kind=args.reward)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return EnvConfig(device=args.device, objective=objective, reward=reward, tools=not args.no_tools, reply_submits=args.reply_submits,
                     store=Path(args.store).expanduser() if args.store else None)


def rollout_cmd(args: argparse.Namespace) -> int:
    from kernelwright.agent.replay import make_backend
    from kernelwright.judge.evaluate import resolve_device
    from kernelwright.problems.loader import ProblemError
    from kernelwright.rl.tasks import load_tasks

    config = _env_config(args)
    if args.start_within_minutes is not None and not args.start_within_minutes > 0:
        raise UsageError(f"--start-within-minutes must be positive, got {args.start_within_minutes}")
    if args.concurrency < 1 or (args.episodes is not None and args.episodes < 1):
        raise UsageError(f"--episodes and --concurrency must be at least 1, got {args.episodes} and {args.concurrency}")
    split = None if args.split == "all" else args.split
    try:  # all checked before a pool's workers start
        device = resolve_device(args.device)
        tasks = load_tasks(args.tasks, heldout=args.heldout, device=device, split=split)
        backend = make_backend(args.model, base_url=args.base_url, timeout_s=args.timeout_s)
    except (ValueError, ProblemError) as exc:
        raise UsageError(str(exc)) from None
    if not tasks:
        raise UsageError(f"{args.tasks}: no task in split {args.split!r}")
    pool = _pool(args, config)
    try:
        if pool is not None and pool.device != device:  # a Ray cluster's device: the tasks at its sizes
            device = pool.device
            try:
                tasks = load_tasks(args.tasks, heldout=args.heldout, device=device, split=split)
            except (ValueError, ProblemError) as exc:
                raise UsageError(str(exc)) from None
            if not tasks:
                raise UsageError(f"{args.tasks}: no task in split {args.split!r} on {device}")
        return _rollout(args, replace(config, pool=pool, device=device), tasks, backend)
    finally:
        if pool is not None:
            pool.close()


def _pool(args: argparse.Namespace, config: Any) -> Any:
    """The judge's pool that --ray / --pool ask for (client.pool), or None; what a pool cannot do is
    refused before a worker starts."""
    from kernelwright.client.commands import check_pool_args, pool_from_args, pool_wanted

    if not pool_wanted(args):
        return None
    try:
        check_pool_args(args, config.objective.policy())
        return pool_from_args(args, args.device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _rollout(args: argparse.Namespace, config: Any, tasks: list[Any], backend: Any) -> int:
    from kernelwright.console import err
    from kernelwright.rl.rollout import EPISODES, ModelDown, run_rollout

    device = config.device
    n = args.episodes
    judged = "" if config.pool is None else f", judged by a pool of {config.pool.size} worker(s)"
    err.print(f"rollout of {n or ('the planned' if args.resume else len(tasks))} episode(s) over {len(tasks)} task(s), {args.concurrency} at a time, "
              f"model {args.model}, device {device}{judged}", markup=False, highlight=False)
    if config.pool is not None and args.concurrency < config.pool.size:
        err.print(f"note: --concurrency {args.concurrency} keeps at most {args.concurrency} of the pool's {config.pool.size} workers busy",
                  markup=False, highlight=False)
    finished = [0]

    def progress(row: dict[str, Any]) -> None:
        finished[0] += 1
        r = row.get("reward") or {}
        value = "excluded" if row.get("excluded") else f"{r.get('value'):g}"
        err.print(f"[{finished[0]}] episode {row['seq']} {row['task']['id']}: reward {value} ({row.get('end')}, {row.get('turns')} turns)",
                  markup=False, highlight=False)

    try:
        result = run_rollout(tasks, backend, config, episodes=n, concurrency=args.concurrency, out=Path(args.out),
                             resume=args.resume, progress=progress, source=args.tasks,
                             start_within_s=None if args.start_within_minutes is None else args.start_within_minutes * 60)
    except ModelDown as exc:
        err.print(f"stopped: {exc}", markup=False, highlight=False)
        return 1
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    mean = result["mean_reward"]
    later = f"; {result['not_started']} not started in time (--resume runs them)" if result["not_started"] else ""
    _report(args, result, f"{result['recorded']} of {result['episodes']} episodes recorded ({result['new']} now, {result['excluded']} excluded{later}); "
                          f"mean reward {mean if mean is None else round(mean, 3)}; milestones {result['milestones']}; "
                          f"{result['episodes_per_hour']} episodes per hour",
            f"wrote {Path(args.out) / EPISODES} and the store's rl_episodes (rollout {result['rollout']})")
    return 0


def _report(args: argparse.Namespace, result: dict[str, Any], line: str, written: str) -> None:
    """The result as JSON (--json) or one line on stdout; what was written on stderr."""
    from kernelwright.console import out
    from kernelwright.written import tell

    if args.json:
        out.print_json(json.dumps(result))
    else:
        out.print(line, markup=False, highlight=False)
    tell([written])


def export_sft_cmd(args: argparse.Namespace) -> int:
    from kernelwright.rl.sft import export_sft, read_episodes

    try:
        records = read_episodes(args.sources, store=Path(args.store).expanduser() if args.store else None)
        result = export_sft(records, Path(args.output), min_reward=args.min_reward, split=args.split, heldout=args.heldout,
                            arguments=args.tool_arguments)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _report(args, result, f"{result['written']} example(s) from {result['read']} episode(s) (reward >= {args.min_reward:g}, split {args.split}); "
                          f"left out: {result['skipped']}", f"wrote {args.output}")
    return 0


def export_verl_cmd(args: argparse.Namespace) -> int:
    from kernelwright.judge.evaluate import resolve_device
    from kernelwright.problems.loader import ProblemError
    from kernelwright.rl.tasks import load_tasks
    from kernelwright.rl.verl_data import AGENT_NAME, SINGLE_TURN, dataset_rows, write_agent_loop_config, write_parquet, write_tool_config

    if args.budget_tokens is not None:
        raise UsageError("--budget-tokens is not counted under verl: its rollout.response_length bounds an episode's tokens")
    config = _env_config(args)
    out = Path(args.out)
    try:
        config = replace(config, device=resolve_device(args.device))
        tasks = load_tasks(args.tasks, heldout=args.heldout, device=config.device)
    except (ValueError, ProblemError) as exc:
        raise UsageError(str(exc)) from None
    written, counts = [], {}
    for split in ("train", "test"):
        rows = dataset_rows([t for t in tasks if t.split == split], config, tools=config.tools)
        counts[split] = len(rows)
        if rows:
            written.append(str(write_parquet(rows, out / f"{split}.parquet")))
        else:
            (out / f"{split}.parquet").unlink(missing_ok=True)  # an older export's rows are not this one's
    written.append(str(write_agent_loop_config(out / "kernelwright_agent_loop.yaml", config)))
    if config.tools:
        written.append(str(write_tool_config(out / "kernelwright_tools.yaml", config)))
    result = {"tasks": len(tasks), "rows": counts, "files": written, "agent_name": AGENT_NAME if config.tools else SINGLE_TURN}
    _report(args, result, f"{counts['train']} train and {counts['test']} test row(s) from {len(tasks)} task(s) for verl "
                          f"(agent loop {result['agent_name']}); its settings: docs/rl.md", "wrote " + ", ".join(written))
    return 0


def _env_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="objective settings (JSON or TOML), as for optimize; flags win")
    p.add_argument("--max-turns", type=int, help="model turns per episode (default 40)")
    p.add_argument("--budget-tokens", type=int, help="tokens per episode")
    p.add_argument("--budget-minutes", type=float, help="wall minutes per episode")
    p.add_argument("--target-speedup", type=float, help="the target the prompt states")
    p.add_argument("--reward", choices=("milestone", "log_speedup"), default="milestone", help="the reward (default milestone: -1, 1, 2, 3)")
    p.add_argument("--reply-submits", action="store_true", help="a reply holding code ends the episode (single-turn)")
    p.add_argument("--no-tools", action="store_true", help="offer no tools: the model answers with fenced code")
    p.add_argument("--language", choices=LANGUAGES, help="what the model writes kernels in: cuda (default; C++ on the CPU backend) or triton")


def add_parsers(sub: Any) -> None:
    r = sub.add_parser("rl", help="the RL environment: rollouts of a model, recorded for training")
    rsub = r.add_subparsers(dest="rl_command", required=True)
    ro = rsub.add_parser("rollout", help="run episodes of a model against the environment, many at once; each recorded as it ends")
    ro.add_argument("--tasks", required=True, help="builtin, builtin:LEVEL, kernelbench:PATH[:LEVEL], a problem folder, or a synthesis's tasks.jsonl")
    ro.add_argument("--split", choices=SPLITS, default="train", help="which tasks (default train)")
    ro.add_argument("--heldout", type=float, default=0.1, help="the fraction of problems held out as the test split (default 0.1)")
    ro.add_argument("--model", required=True, help="openai:NAME (any OpenAI-compatible server: vLLM, SGLang), anthropic:NAME or replay:FILE")
    ro.add_argument("--base-url", help="the model's server")
    ro.add_argument("--episodes", type=int, default=None, help="episodes in all; episode i works on task i mod the tasks "
                                                                "(default: one per task; on --resume, the planned number)")
    ro.add_argument("--concurrency", type=int, default=1, help="episodes at once (default 1)")
    ro.add_argument("--out", required=True, help="the rollout's folder: rollout.json and episodes.jsonl")
    ro.add_argument("--resume", action="store_true", help="continue the rollout in --out: only the episodes not yet recorded run")
    ro.add_argument("--start-within-minutes", type=float, help="start no episode later than this (those running finish; "
                                                                  "--resume runs the rest): a rollout that fits a time slot")
    _env_flags(ro)
    ro.add_argument("--timeout-s", type=float, default=600.0, help="per model request (default 600 s)")
    device_flag(ro, help="where candidates are judged (default: auto)")
    pool_flags(ro)
    add_policy_flags(ro, objective=True)
    store_flag(ro)
    json_flag(ro)
    ro.set_defaults(func=rollout_cmd)
    ex = rsub.add_parser("export-sft", help="the chat-format trajectories of good episodes, for rejection fine-tuning")
    ex.add_argument("sources", nargs="+", help="rollout folders, episodes.jsonl files or rollout ids in the store (ro-...)")
    ex.add_argument("--min-reward", type=float, required=True, help="keep episodes with at least this reward (e.g. 2: faster than eager)")
    ex.add_argument("--split", choices=SPLITS, default="train", help="which tasks' episodes (default train: held-out problems stay out)")
    ex.add_argument("--heldout", type=float, default=None, help="split each episode's problem again with this held-out fraction "
                                                                "(default: the split its rollout recorded)")
    ex.add_argument("--tool-arguments", choices=("json", "object"), default="json",
                    help="tool-call arguments as JSON text (Chat Completions, the default) or as objects (chat templates that apply tojson)")
    ex.add_argument("-o", "--output", required=True, help="the JSONL to write")
    store_flag(ex)
    json_flag(ex)
    ex.set_defaults(func=export_sft_cmd)
    ve = rsub.add_parser("export-verl", help="tasks as verl's parquet rows, with the tools' and the agent loop's config files")
    ve.add_argument("--tasks", required=True, help="builtin, builtin:LEVEL, kernelbench:PATH[:LEVEL], a problem folder, or a synthesis's tasks.jsonl")
    ve.add_argument("--heldout", type=float, default=0.1, help="the fraction of problems held out as test.parquet (default 0.1)")
    device_flag(ve, help="where the rollout workers judge, as the prompts say (auto: this machine's; pass cuda when exporting without the GPU)")
    ve.add_argument("--out", required=True, help="the folder: train.parquet, test.parquet, kernelwright_tools.yaml, kernelwright_agent_loop.yaml")
    _env_flags(ve)
    add_policy_flags(ve, objective=True)
    store_flag(ve)
    json_flag(ve)
    ve.set_defaults(func=export_verl_cmd)
