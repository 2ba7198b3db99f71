"""Depthwise 2-D convolution (groups = channels), 7x7 kernel with 'same' padding, as in ConvNeXt blocks.
Input (64, 384, 64, 64) and output are 403 MB each (805 MB); 9.9 GFLOP, so it is memory-bound."""

import torch
import torch.nn as nn

CATEGORY = "convolution"

BATCH, CHANNELS, HEIGHT, WIDTH = 64, 384, 64, 64
CPU_SIZE = {"BATCH": 4, "CHANNELS": 96, "HEIGHT": 32, "WIDTH": 32}  # the CPU backend's size (problems.sizes)
KERNEL = 7


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.depthwise(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, KERNEL]


def get_test_inputs():
    return [[torch.randn(1, CHANNELS, 5, 5)], [torch.randn(3, CHANNELS, 19, 33)]]
