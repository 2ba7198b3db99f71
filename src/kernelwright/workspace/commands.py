"""The workspace commands: `workspace init|import|export|history` and `check`.

Results on stdout (the report, or JSON with --json); progress on stderr. `check` exits with the
codes of workspace.exits, so a script or coding agent can act on the code alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kernelwright import written
from kernelwright.client.commands import service_flag
from kernelwright.agent.objective import LANGUAGES
from kernelwright.flags import add_policy_flags, device_flag, json_flag, store_flag
from kernelwright.workspace.exits import EXIT_CODES



def _usage(message: str) -> Exception:
    from kernelwright.errors import UsageError

    return UsageError(message)


def _objective(args: argparse.Namespace) -> Any:
    """The workspace's objective: --policy file < flags."""
    from kernelwright.agent.commands import objective_flags
    from kernelwright.agent.objective import load_config, merge

    try:
        return merge(load_config(args.policy) if args.policy else {}, objective_flags(args))
    except ValueError as exc:
        raise _usage(str(exc)) from None


def _progress(args: argparse.Namespace) -> Any:
    from kernelwright.console import err

    if getattr(args, "quiet", False):
        return None
    return lambda message: err.print(message, markup=False, highlight=False, style="dim")


def _print(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    from kernelwright.console import out

    if args.json:
        sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
    else:
        out.print(text, markup=False, highlight=False)


# -- workspace init / import / export -----------------------------------------------------------------


def init_cmd(args: argparse.Namespace) -> int:
    from kernelwright.workspace.layout import init_workspace

    try:
        config = init_workspace(args.problem, args.dir, objective=_objective(args), device=args.device)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    return _made(args, config, "made")


def import_cmd(args: argparse.Namespace) -> int:
    from kernelwright.workspace.cuda_agent import import_workdir

    try:
        config = import_workdir(args.src, args.dir, objective=_objective(args), device=args.device)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    return _made(args, config, f"imported {args.src} into")


def _made(args: argparse.Namespace, config: Any, verb: str) -> int:
    from kernelwright.store import Store

    root = Path(args.dir).expanduser().resolve()
    with Store.open(args.store) as db:  # the problem and policy as first recorded: later checks compare with them
        db.register_workspace(config.id, root=root, problem_hash=config.problem_hash, problem_name=config.problem_name,
                              config=config.to_dict())
    text = (f"{verb} workspace {config.id} for {config.problem_name} in {root}\n"
            f"  next: cd {root} && kernelwright check --quick")
    _print(args, {"workspace": config.id, "root": str(root), **config.to_dict()}, text)
    ref = str(Path(config.reference))
    names = [f"{n} (read-only)" if n == ref else n for n in written.files_in(root)]
    written.tell([written.wrote_in(root, names), written.recorded(f"workspace {config.id}", args.store)])
    return 0


def export_cmd(args: argparse.Namespace) -> int:
    from kernelwright.workspace.cuda_agent import export_workdir

    skipped: dict[str, str] = {}
    try:
        dest = export_workdir(args.workspace, args.dest, skipped)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    _print(args, {"exported": str(dest), "layout": args.layout}, f"exported workspace {args.workspace} as a CUDA Agent workdir: {dest}")
    written.tell([written.wrote_in(dest, written.files_in(dest)), *(written.skipped(n, why) for n, why in skipped.items())])
    return 0


# -- check and history ------------------------------------------------------------------------------


def _session(args: argparse.Namespace) -> Any:
    from kernelwright.workspace.session import open_session

    try:
        return open_session(args.workspace, device=args.device, store=args.store, progress=_progress(args))
    except ValueError as exc:
        raise _usage(str(exc)) from None


def check_cmd(args: argparse.Namespace) -> int:
    """compile, verify, profile; the report; the exit code of workspace.exits."""
    session = _session(args)
    mode = "quick" if args.quick else "final" if args.final else "full"
    try:
        if args.sanitize_timeout_s is not None:
            session.set_sanitize_timeout(args.sanitize_timeout_s)
        result = session.check(mode, ncu=not args.no_ncu, breakdown=args.breakdown, source="cli")
    except ValueError as exc:
        raise _usage(str(exc)) from None
    _print(args, result.data, result.text)
    written.tell([written.recorded(f"check {result.seq} of workspace {session.config.id}", session.store) if result.seq is not None
                  else written.not_recorded("check", "the store could not be written (see the warning above)")])
    return int(result.exit_code)


def history_cmd(args: argparse.Namespace) -> int:
    """The workspace's checks from the store. Reads only workspace.json and the store (no judge, no
    reference check), so the history stays readable when the workspace is in a bad state."""
    from kernelwright.store import Store
    from kernelwright.workspace.layout import find_root, read_config

    try:
        root = find_root(args.workspace)
        config = read_config(root)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    with Store.open(args.store) as db:
        try:
            db.get_workspace(config.id)
            rows = db.workspace_checks(config.id)
        except KeyError:
            rows = []
    if args.json:
        sys.stdout.write(json.dumps({"workspace": config.id, "problem": config.problem_name, "root": str(root), "checks": rows},
                                    indent=2, allow_nan=False) + "\n")
        return 0
    from kernelwright.console import out

    out.print(history_table(config, rows), markup=False, highlight=False)
    if args.show is not None:
        match = [r for r in rows if r["seq"] == args.show]
        if not match:
            raise _usage(f"no check {args.show} in workspace {config.id} (it has {len(rows)})")
        out.print("\n" + match[0]["report"], markup=False, highlight=False)
    return 0


def history_table(config: Any, rows: list[dict[str, Any]]) -> str:
    """The history as a text table."""
    lines = [f"workspace {config.id} · {config.problem_name} · {len(rows)} check(s)",
             f"{'#':>3}  {'when (UTC)':19}  {'kind':14} {'source':6} {'status':14} {'exit':>4}  {'ms':>9}  {'vs best':>7}  candidate"]
    for r in rows:
        ms = "" if r["runtime_ms"] is None else f"{r['runtime_ms']:.4g}"
        sp = "" if r["speedup_vs_best"] is None else f"{r['speedup_vs_best']:.3g}x"
        lines.append(f"{r['seq']:>3}  {r['created_at'][:19].replace('T', ' '):19}  {r['kind']:14} {r['source']:6} {r['status']:14} "
                     f"{r['exit_code'] if r['exit_code'] is not None else '':>4}  {ms:>9}  {sp:>7}  {str(r['candidate_hash'] or '')[:12]}")
    return "\n".join(lines)


# -- parsers ------------------------------------------------------------------------------------------


def _policy_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", type=Path, help="a file (JSON or TOML) of objective settings: precision, atol, rtol, libraries, "
                                               "allow_torch_compute, target_speedup, ...; flags win over it")
    device_flag(p, help="where checks judge (default auto: cuda when present, decided at each check)")
    p.add_argument("--target-speedup", type=float, help="the goal, against the faster of eager and torch.compile")
    p.add_argument("--language", choices=LANGUAGES, help="what the kernels are written in: cuda (default; C++ on the CPU backend) or triton")
    add_policy_flags(p, objective=True)
    store_flag(p, help="the store that records the workspace (default: $KERNELWRIGHT_STORE or the user data dir)")
    json_flag(p)


def _in_workspace(p: argparse.ArgumentParser, *, device: bool = True) -> None:
    p.add_argument("--workspace", "-C", default=".", help="the workspace (or a folder inside it; default: the current folder)")
    if device:
        device_flag(p, help="where to judge (default: the workspace's setting)")
    store_flag(p)
    json_flag(p)


def _exit_codes_epilog() -> str:
    return "exit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())


def add_parsers(sub: Any) -> None:
    """Register `workspace` and `check` on the CLI's subparsers."""
    w = sub.add_parser("workspace", help="a folder for working on one problem by hand or with any coding agent")
    wsub = w.add_subparsers(dest="workspace_command", required=True)
    wi = wsub.add_parser("init", help="make a workspace: the reference (read-only), model_new.py, kernels/, SKILL.md, README.md")
    wi.add_argument("problem", help="a KernelBench-format .py file, builtin:NAME or kernelbench:PATH:LEVEL:ID")
    wi.add_argument("dir", type=Path, help="a new or empty folder")
    _policy_flags(wi)
    wi.set_defaults(func=init_cmd)
    wm = wsub.add_parser("import", help="make a workspace from a CUDA Agent workdir (model.py, model_new.py, binding.cpp, kernels/)")
    wm.add_argument("src", type=Path, help="the CUDA Agent workdir")
    wm.add_argument("dir", type=Path, help="a new or empty folder")
    _policy_flags(wm)
    wm.set_defaults(func=import_cmd)
    we = wsub.add_parser("export", help="write a workspace's task in the CUDA Agent workdir layout")
    we.add_argument("workspace", help="the workspace")
    we.add_argument("dest", type=Path, help="a new or empty folder")
    we.add_argument("--layout", default="cuda-agent", choices=("cuda-agent",), help="the layout (cuda-agent)")
    json_flag(we)
    we.set_defaults(func=export_cmd)
    wh = wsub.add_parser("history", help="every check, tool call and submission made in a workspace")
    _in_workspace(wh, device=False)
    wh.add_argument("--show", type=int, default=None, metavar="N", help="also print check N's full report")
    wh.set_defaults(func=history_cmd, device="auto")
    c = sub.add_parser("check", help="in a workspace: compile, verify and profile the candidate; a compact report and an exit code",
                       epilog=_exit_codes_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    group = c.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="compile and verify only (no timing)")
    group.add_argument("--final", action="store_true", help="the judgement that counts: fresh seeds, baselines timed beside it, compute-sanitizer on a GPU")
    c.add_argument("--no-ncu", action="store_true", help="skip Nsight Compute's per-kernel figures (GPU)")
    c.add_argument("--breakdown", action="store_true", help="add the reference's time per kernel (torch profiler)")
    add_policy_flags(c, only=("sanitize_timeout_s",))  # --final: instead of the workspace's
    c.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    _in_workspace(c)
    service_flag(c)
    c.set_defaults(func=check_cmd)
