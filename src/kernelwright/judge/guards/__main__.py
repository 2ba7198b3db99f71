"""Print docs/guards.md from the registry."""

import sys

from kernelwright.judge.guards import markdown

sys.stdout.write(markdown())
