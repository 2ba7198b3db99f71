"""Reverse (suffix) cumulative sum over the middle, time axis of (batch, time, features) = (64, 4096, 512):
out[b, t, f] = sum of x[b, s, f] for s >= t, the undiscounted reward-to-go. 537 MB read, 537 MB written."""

import torch
import torch.nn as nn

CATEGORY = "scan"

BATCH, TIME, FEATURES = 64, 4096, 512
CPU_SIZE = {"BATCH": 4, "TIME": 512, "FEATURES": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, rewards: torch.Tensor) -> torch.Tensor:
        flipped = torch.flip(rewards, dims=(1,))
        return torch.flip(torch.cumsum(flipped, dim=1), dims=(1,))


def get_inputs():
    return [torch.randn(BATCH, TIME, FEATURES)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(2, 1, 9)],
        [torch.randn(3, 1000, 5)],
        [torch.randn(4, 7, 77).transpose(1, 2)],
    ]
