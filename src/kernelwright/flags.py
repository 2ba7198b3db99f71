"""Flags shared by the commands: the judging policy (read back by policy_from_args), the device,
JSON and store flags, and earlier flag names still accepted."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelwright.errors import UsageError
from kernelwright.judge.policy import BASELINE_MODES, COMPILE_MODES, PRECISIONS, PRESETS, Policy, TimingConfig, kernelbench_preset
from kernelwright.judge.provenance import LIBRARIES
from kernelwright.problems.sizes import HELP as SIZE_HELP, SIZES


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


def old_name(p: argparse.ArgumentParser, old: str, dest: str, **kw) -> None:
    """A flag's earlier name, still accepted, not shown: each flag has one name across the commands."""
    p.add_argument(old, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kw)


def common_flags(p: argparse.ArgumentParser) -> None:
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
