"""kernelwright: write, verify and select kernels that beat PyTorch, with a judge that cannot be fooled."""

__version__ = "0.1.0"
