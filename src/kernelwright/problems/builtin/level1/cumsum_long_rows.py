"""Inclusive prefix sum (torch.cumsum) along the long last dimension of a 2048 x 65536 matrix.
537 MB read, 537 MB written (1074 MB); memory-bound, with a serial dependency along each row."""

import torch
import torch.nn as nn

CATEGORY = "scan"

ROWS, COLS = 2048, 65536
CPU_SIZE = {"ROWS": 64, "COLS": 16384}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def get_test_inputs():
    # one long odd row, many short rows, and a column-major view
    return [[torch.randn(1, 100003)], [torch.randn(999, 3)], [torch.randn(515, 40).t()]]
