"""A chain of elementwise ops, fp32: y = gelu(x * scale + shift) * sigmoid(x), CPU size.

Eager runs five kernels (mul, add, gelu, sigmoid, mul), each a full pass over memory; one fused
loop reads x once and writes y once.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS, COLS = 512, 1024


class Model(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x * self.scale + self.shift) * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(ROWS, COLS, dtype=torch.float32)]


def get_init_inputs():
    return [1.5, -0.25]


def get_test_inputs():
    """Further shapes for correctness only: odd sizes (a tail after the float4 part), a tensor
    that is contiguous but not 16-byte aligned, and a non-contiguous view."""
    return [
        [torch.randn(7, 13, dtype=torch.float32)],
        [torch.randn(3, 1025, dtype=torch.float32)],
        [torch.randn(4097, dtype=torch.float32)[1:]],  # contiguous, offset by one float
        [torch.randn(1000, 64, dtype=torch.float32).t()],  # non-contiguous (64, 1000) view
        [torch.randn(2, 3, 4, 5, dtype=torch.float32) * 10.0],  # four dimensions, wider range
    ]
