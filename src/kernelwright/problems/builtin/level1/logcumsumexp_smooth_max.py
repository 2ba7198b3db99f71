"""Smooth running maximum: tau * logcumsumexp(x / tau) along time, tau = 0.5, on (16, 512, 16384) signals.
537 MB read, 537 MB written (1074 MB); a numerically careful scan (running max plus rescaled sum)."""

import torch
import torch.nn as nn

CATEGORY = "scan"

BATCH, CHANNELS, TIME = 16, 512, 16384
CPU_SIZE = {"BATCH": 2, "CHANNELS": 64, "TIME": 4096}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        t = self.temperature
        return t * torch.logcumsumexp(signal / t, dim=2)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, TIME)]


def get_init_inputs():
    return [0.5]


def get_test_inputs():
    return [
        [torch.randn(1, 1, 1)],
        [torch.randn(2, 3, 4099)],
        [torch.randn(3, 50, 8).permute(0, 2, 1)],
    ]
