"""Standard 2-D convolution with bias: 3x3 kernel, stride 1, padding 1, 128 -> 128 channels on 112 x 112 maps.
Input (32, 128, 112, 112) and output are 205 MB each (411 MB with the 0.6 MB of weights); 118 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "convolution"

BATCH, C_IN, C_OUT, HEIGHT, WIDTH = 32, 128, 128, 112, 112
CPU_SIZE = {"BATCH": 2, "C_IN": 32, "C_OUT": 32, "HEIGHT": 56, "WIDTH": 56}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=padding, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, HEIGHT, WIDTH)]


def get_init_inputs():
    return [C_IN, C_OUT, 3, 1]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 7, 9)],
        [torch.randn(3, C_IN, 31, 17)],
        [torch.randn(2, 13, 11, C_IN).permute(0, 3, 1, 2)],
    ]
