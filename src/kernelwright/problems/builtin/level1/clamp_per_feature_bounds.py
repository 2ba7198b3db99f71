"""Clamp every feature to its own learned range: torch.clamp(x, lower, upper) with lower and upper
of shape (4096,) broadcast over x (24, 1024, 4096). 403 MB read, 403 MB written."""
import torch
import torch.nn as nn

CATEGORY = "broadcast"

BATCH, SEQ, DIM = 24, 1024, 4096
CPU_SIZE = {"BATCH": 4, "SEQ": 256, "DIM": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lower = nn.Parameter(-0.25 - torch.rand(dim))
        self.upper = nn.Parameter(0.25 + torch.rand(dim))

    def forward(self, x):
        return torch.clamp(x, min=self.lower, max=self.upper)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM]


def get_test_inputs():
    return [[torch.randn(7, DIM)], [torch.randn(3, 5, DIM) * 4.0], [torch.randn(DIM, 2, 3).permute(1, 2, 0)]]
