"""Running product of growth factors: cumprod over the last axis of (1 + rate * x), rate = 0.01,
on 262144 series of 512 steps (the factors stay near 1, so the products stay O(1)). 537 MB read, 537 MB written."""

import torch
import torch.nn as nn

CATEGORY = "scan"

SERIES, STEPS = 262144, 512
CPU_SIZE = {"SERIES": 2048}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        factors = 1.0 + self.rate * x
        return torch.cumprod(factors, dim=-1)


def get_inputs():
    return [torch.randn(SERIES, STEPS)]


def get_init_inputs():
    return [0.01]


def get_test_inputs():
    return [[torch.randn(5, 3, 129)], [torch.randn(1, 2000)], [torch.randn(600, 11)[::3]]]
