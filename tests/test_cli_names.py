"""The command line a newcomer meets: --version, one name per flag across the commands, --device
with the same choices everywhere, progress lines that stay whole in a log."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import cli_commands, shown_options
from kernelwright.cli import build_parser


def test_version_is_quick_and_says_what_it_is():
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kernelwright", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kernelwright 0.") and "Python" in done.stdout
    assert time.monotonic() - t0 < 10  # no torch import (about 0.5 s on the CPU box)


def test_one_name_per_flag_acrosscli_commands():
    """The names a newcomer saw differ between commands are gone from every help text; the old
    spellings still parse, hidden, so scripts keep working."""
    commands = cli_commands(build_parser())
    retired = {"--budget-s": "--timing-budget-s", "--composer-model": "--model", "--no-compile": "--no-compile-baseline", "--mode": "--compile-mode"}
    for name, parser in commands.items():
        shown = shown_options(parser)
        for old, new in retired.items():
            assert old not in shown, f"{name} shows {old}; the name everywhere is {new}"
        models = [o for o in shown if o.endswith("-model") or o == "--model"]
        assert models in ([], ["--model"]), f"{name}: the model flag is --model, not {models}"
        if "--device" in shown:
            assert tuple(shown["--device"].choices or ()) == ("auto", "cuda", "cpu"), f"{name}: --device {shown['--device'].choices}"
    p = build_parser()
    args = p.parse_args(["eval", "p.py", "c.py", "--budget-s", "3"])
    assert args.timing_budget_s == 3.0
    assert p.parse_args(["eval", "p.py", "c.py", "--timing-budget-s", "4"]).timing_budget_s == 4.0
    assert p.parse_args(["eval", "p.py", "c.py"]).timing_budget_s is None  # the device's default (below)
    from kernelwright.flags import policy_from_args

    policy = policy_from_args(p.parse_args(["baseline", "--mode", "max-autotune-no-cudagraphs", "--no-compile"]))
    assert policy.compile_mode == "max-autotune-no-cudagraphs" and policy.compile_baseline is False
    policy = policy_from_args(p.parse_args(["baseline"]))
    assert policy.compile_mode == "default" and policy.compile_baseline is True
    args = p.parse_args(["synth", "--composer-model", "openai:x"])
    assert args.composer_model == "openai:x" and p.parse_args(["synth", "--model", "openai:y"]).composer_model == "openai:y"
    assert p.parse_args(["synth"]).composer_model is None


def test_synth_device_is_a_choice():
    done = subprocess.run([sys.executable, "-m", "kernelwright", "synth", "--device", "gpu"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "invalid choice: 'gpu'" in done.stderr


def test_progress_lines_stay_whole_when_stderr_is_not_a_terminal():
    line = "progress " + " ".join(f"word{i}" for i in range(60))  # about 450 characters
    code = f"from kernelwright.cli import err; err.print({line!r}, markup=False, highlight=False, style='dim')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == line


def test_timing_budget_defaults_by_device_and_an_explicit_one_wins():
    """A CPU eval spent 20 s timing what are never claims; the CPU's default is 5 s, the GPU keeps 20."""
    from kernelwright.cli import policy_from_args
    from kernelwright.judge.policy import TimingConfig

    p = build_parser()
    timing = policy_from_args(p.parse_args(["eval", "p.py", "c.py"])).timing
    assert timing.budget_s is None and timing.budget_for(cuda=False) == 5.0 and timing.budget_for(cuda=True) == 20.0
    timing = policy_from_args(p.parse_args(["eval", "p.py", "c.py", "--timing-budget-s", "20"])).timing
    assert timing.budget_for(cuda=False) == 20.0 and timing.budget_for(cuda=True) == 20.0
    assert TimingConfig(budget_s=3).budget_for(cuda=False) == 3
