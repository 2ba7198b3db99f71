"""Errors shared by the command line's modules (kept apart from cli.py so that `python -m
kernelwright.cli` and `import kernelwright.cli` see one class)."""


class UsageError(ValueError):
    """Bad command-line input (exit code 2)."""
