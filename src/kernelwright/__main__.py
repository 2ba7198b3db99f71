"""`python -m kernelwright ...` is the kernelwright command."""

from kernelwright.cli import main

main()
