"""Attention-style pooling of each row: sum_j softmax(s / T)_j * v_j, with a temperature T.
scores and values (16384, 8192) fp32: 1074 MB read; output (16384,): 64 KB."""
import torch
import torch.nn as nn

CATEGORY = "elementwise_reduction"

ROWS, COLS = 16384, 8192
CPU_SIZE = {"ROWS": 512, "COLS": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, scores: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(scores / self.temperature, dim=1)
        return (weights * values).sum(dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [0.5]


def get_test_inputs():
    return [
        [torch.randn(1, 5), torch.randn(1, 5)],
        [torch.randn(9, 3001), torch.randn(9, 3001)],
        [torch.randn(700, 13).t(), torch.randn(13, 1400)[:, 1::2]],
    ]
