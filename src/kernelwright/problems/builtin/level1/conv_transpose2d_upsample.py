"""Transposed 2-D convolution that doubles the resolution, as in a U-Net decoder's up-convolution:
kernel 2, stride 2, 256 -> 128 channels. Input (32, 256, 64, 64) 134 MB, output (32, 128, 128, 128) 268 MB
(403 MB with the 0.5 MB of weights); 34.4 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "convolution"

BATCH, C_IN, C_OUT, HEIGHT, WIDTH = 32, 256, 128, 64, 64
CPU_SIZE = {"BATCH": 2, "C_IN": 64, "C_OUT": 32, "HEIGHT": 32, "WIDTH": 32}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, scale: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size=scale, stride=scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, HEIGHT, WIDTH)]


def get_init_inputs():
    return [C_IN, C_OUT, 2]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 3, 5)],
        [torch.randn(2, C_IN, 21, 10)],
        [torch.randn(2, C_IN, 30, 22)[:, :, ::2, ::2]],
    ]
