"""Softplus with beta=2 and threshold=3 (linear once beta * x > threshold, which randn inputs do
reach) on (8192, 12288) fp32. 403 MB read, 403 MB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "activation"

M = 8192
N = 12288
CPU_SIZE = {"M": 512, "N": 1536}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, beta: float, threshold: float):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x, beta=self.beta, threshold=self.threshold)


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return [2.0, 3.0]


def get_test_inputs():
    return [[torch.randn(7, 1000)], [torch.randn(33, 5) * 20.0], [torch.randn(999)]]
