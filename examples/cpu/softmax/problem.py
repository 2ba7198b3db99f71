"""Softmax over the last dimension, fp32, at a size for the CPU backend (256 x 4096)."""

import torch
import torch.nn as nn

ROWS, COLS = 256, 4096


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
    """Further shapes for correctness only: odd widths, three dimensions, a non-contiguous view."""
    return [
        [torch.randn(7, 1000, dtype=torch.float32)],
        [torch.randn(33, 4097, dtype=torch.float32)],
        [torch.randn(3, 40000, dtype=torch.float32)],
        [torch.randn(2, 3, 777, dtype=torch.float32)],
        [torch.randn(1024, 64, dtype=torch.float32).t()],  # non-contiguous (64, 1024) view
    ]
