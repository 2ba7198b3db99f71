"""The console every command writes to: results on stdout, progress and errors on stderr. Below the
commands, so that no subcommand imports kernelwright.cli."""

from __future__ import annotations

import sys

from rich.console import Console

out = Console(width=None if sys.stdout.isatty() else 160)  # tables unwrapped when piped
# Progress and errors: wrapped at the terminal's width on a terminal, never wrapped when stderr is a
# file or a pipe (a log line stays one line).
err = Console(stderr=True, soft_wrap=not sys.stderr.isatty())
