"""Row log-sum-exp of an affine map: logsumexp(x * scale + bias, dim=-1) with a learned per-column bias.
x (24576, 8192) fp32: 805 MB read; output (24576,): 98 KB."""
import torch
import torch.nn as nn

CATEGORY = "elementwise_reduction"

ROWS, COLS = 24576, 8192
CPU_SIZE = {"ROWS": 512, "COLS": 2048}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, cols: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(x * self.scale + self.bias, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS, 2.5]


def get_test_inputs():
    return [
        [torch.randn(3, COLS)],
        [torch.randn(2, 11, COLS)],
        [torch.randn(2 * COLS, 5).t()[:, ::2]],
    ]
