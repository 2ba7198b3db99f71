"""Adaptive average pooling of a backbone's 15 x 15 feature map to a fixed 7 x 7 grid (overlapping windows).
Input (384, 2048, 15, 15) 708 MB, output (384, 2048, 7, 7) 154 MB (862 MB); memory-bound."""

import torch
import torch.nn as nn

CATEGORY = "pooling"

BATCH, CHANNELS, SIDE = 384, 2048, 15
CPU_SIZE = {"BATCH": 16, "CHANNELS": 128}  # the CPU backend's size (problems.sizes)
OUT_SIDE = 7


class Model(nn.Module):
    def __init__(self, output_size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(output_size)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.pool(features)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIDE, SIDE)]


def get_init_inputs():
    return [(OUT_SIDE, OUT_SIDE)]


def get_test_inputs():
    # smaller, larger and equal to the output grid, and a channels-last layout
    return [
        [torch.randn(2, 3, 5, 9)],
        [torch.randn(1, 4, 7, 7)],
        [torch.randn(3, 2, 50, 23)],
        [torch.randn(2, 16, 16, 6).permute(0, 3, 1, 2)],
    ]
