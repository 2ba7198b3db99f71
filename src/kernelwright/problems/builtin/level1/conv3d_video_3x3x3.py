"""3-D convolution over video clips: 3x3x3 kernel, padding 1, no bias, 32 -> 64 channels.
Input (4, 32, 16, 112, 112) 103 MB, output 205 MB (308 MB with weights); 88.8 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "convolution"

BATCH, C_IN, C_OUT = 4, 32, 64
FRAMES, HEIGHT, WIDTH = 16, 112, 112
CPU_SIZE = {"BATCH": 1, "C_IN": 8, "C_OUT": 16, "FRAMES": 8, "HEIGHT": 28, "WIDTH": 28}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size=(3, 3, 3), padding=(1, 1, 1), bias=False)

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        return self.conv(clip)


def get_inputs():
    return [torch.randn(BATCH, C_IN, FRAMES, HEIGHT, WIDTH)]


def get_init_inputs():
    return [C_IN, C_OUT]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 3, 5, 7)],
        [torch.randn(2, C_IN, 9, 17, 13)],
    ]
