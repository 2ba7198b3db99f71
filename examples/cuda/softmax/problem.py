"""Softmax over the last dimension of wide rows, fp32.

4096 x 32768 floats: 512 MiB read and 512 MiB written, about 18x the H200's 60 MB L2, so the
kernel is bound by HBM bandwidth (floor about 0.25 ms at the measured 4.3 TB/s copy rate).
"""

import torch
import torch.nn as nn

ROWS, COLS = 4096, 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS, dtype=torch.float32)]


def get_init_inputs():
    return []


def get_test_inputs():
    """Further shapes for correctness only: tails, odd widths, rows wider than any on-chip
    buffer, more than 65535 rows, three dimensions, a non-contiguous and a misaligned tensor."""
    return [
        [torch.randn(7, 1000, dtype=torch.float32)],
        [torch.randn(33, 4097, dtype=torch.float32)],  # cols % 4 != 0: scalar path
        [torch.randn(5, 40000, dtype=torch.float32)],  # wider than the register buffer
        [torch.randn(3, 50001, dtype=torch.float32)],  # wider and odd
        [torch.randn(70000, 12, dtype=torch.float32)],  # more rows than a grid's y limit
        [torch.randn(2, 3, 777, dtype=torch.float32)],  # three dimensions
        [torch.randn(2048, 64, dtype=torch.float32).t()],  # non-contiguous (64, 2048) view
        [torch.randn(4 * 1024 + 1, dtype=torch.float32)[1:].view(4, 1024)],  # not 16-byte aligned
    ]
