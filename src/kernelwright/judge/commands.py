"""`kernelwright cache show|prune`: the build cache's size, and pruning it by last use (judge.cache_prune)."""

from __future__ import annotations

import argparse
import json
import sys

from kernelwright.console import err, out
from kernelwright.errors import UsageError
from kernelwright.flags import json_flag

GIB = 2**30


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB // 10 else f"{n / 2**20:.1f} MiB"


def cache_show_cmd(args: argparse.Namespace) -> int:
    from kernelwright.judge.cache_prune import usage

    found = usage()
    if args.json:
        sys.stdout.write(json.dumps(found, indent=2) + "\n")
        return 0
    out.print(f"build cache {found['root']}: {_gib(found['total_bytes'])}", highlight=False)
    for kind, row in found["kinds"].items():
        out.print(f"  {kind}: {row['entries']} entries, {_gib(row['bytes'])}", highlight=False)
    out.print(f"  other (locks, the service's folder; never pruned): {_gib(found['other_bytes'])}", highlight=False)
    return 0


def cache_prune_cmd(args: argparse.Namespace) -> int:
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from kernelwright.judge.cache_prune import check_bounds, prune

    keep = None if args.keep_gb is None else args.keep_gb * GIB
    older = None if args.older_than_days is None else args.older_than_days * 86400.0
    try:
        check_bounds(keep, older, args.min_age_hours * 3600.0)
    except ValueError as exc:
        raise UsageError(f"{exc} (--keep-gb, --older-than-days, --min-age-hours)") from None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=err, transient=True) as bar:
        task = bar.add_task("looking at the cache's entries, least recently used first", total=None)
        done = prune(keep_bytes=None if keep is None else int(keep), older_than_s=older, min_age_s=args.min_age_hours * 3600.0,
                     dry_run=args.dry_run, progress=lambda i, n: bar.update(task, completed=i, total=n))
    if args.json:
        sys.stdout.write(json.dumps({"dry_run": args.dry_run, **done.to_dict()}, indent=2) + "\n")
        return 0 if not done.failed else 1
    if args.dry_run:
        for e in done.removed:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.used))
            sys.stdout.write(f"  {e.kind:16} {_gib(e.bytes):>10}  last used {when}  {e.path}\n")  # never wrapped: a path stays whole
    verb, hold = ("would remove", "would then hold") if args.dry_run else ("removed", "now hold")
    out.print(f"{verb} {len(done.removed)} entries ({_gib(done.freed)}); the entries {hold} {_gib(done.kept_bytes)}", highlight=False)
    if done.busy:
        out.print(f"kept {len(done.busy)} entries the bound would have taken: used within {args.min_age_hours:g} h, or locked by a "
                  "build or a verdict", highlight=False)
    for e, why in done.failed:
        err.print(f"could not remove {e.path}: {why}", highlight=False, markup=False, style="red")
    return 0 if not done.failed else 1


def add_parsers(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("cache", help="the build cache: its size, and pruning it by last use")
    csub = c.add_subparsers(dest="cache_command", required=True)
    cs = csub.add_parser("show", help="the cache's folder, and entries and bytes per kind (raw builds, torch-extension folders)")
    json_flag(cs, help="print one JSON object (root, kinds, other_bytes, total_bytes) and nothing else")
    cs.set_defaults(func=cache_show_cmd)
    cp = csub.add_parser("prune", help="remove raw builds and torch-extension folders, least recently used first",
                         description="Remove raw builds and torch-extension folders (a Triton candidate's compile cache among them), "
                                     "least recently used first: every one unused for --older-than-days, then more until the entries "
                                     "hold at most --keep-gb. One used within --min-age-hours, or whose lock a build or a verdict "
                                     "holds, stays. A removed entry is built again when a verdict needs it.")
    cp.add_argument("--keep-gb", type=float, default=None, metavar="GB", help="remove until the entries hold at most this many GiB")
    cp.add_argument("--older-than-days", type=float, default=None, metavar="DAYS", help="remove every entry unused for this many days")
    cp.add_argument("--min-age-hours", type=float, default=1.0, metavar="HOURS",
                    help="never remove an entry used within this many hours (default 1: a verdict running now keeps what it reads)")
    cp.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    json_flag(cp, help="print one JSON object (removed, busy, freed_bytes, kept_bytes, dry_run) and nothing else")
    cp.set_defaults(func=cache_prune_cmd)
