"""BLAS-style matrix-vector product y = beta * y0 + alpha * (A @ x) with A of 24576 x 12288.
A is 1208 MB; x, y0 and y are 0.1 MB each, so one pass over A bounds it (memory-bound)."""

import torch
import torch.nn as nn

CATEGORY = "matmul"

ROWS, COLS = 24576, 12288
CPU_SIZE = {"ROWS": 1536, "COLS": 768}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, y0: torch.Tensor, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.addmv(y0, a, x, beta=self.beta, alpha=self.alpha)


def get_inputs():
    return [torch.randn(ROWS), torch.randn(ROWS, COLS), torch.randn(COLS)]


def get_init_inputs():
    return [0.5, 2.0]


def get_test_inputs():
    return [
        [torch.randn(7), torch.randn(7, 1000), torch.randn(1000)],
        [torch.randn(333), torch.randn(333, 45), torch.randn(45)],
        [torch.randn(64), torch.randn(129, 64).t(), torch.randn(129)],
    ]
