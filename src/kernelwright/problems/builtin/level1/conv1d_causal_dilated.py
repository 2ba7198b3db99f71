"""Causal dilated 1-D convolution over long sequences (WaveNet / TCN style): left-pad, then Conv1d.
64 -> 128 channels, kernel 3, dilation 4, on (16, 64, 65536): input 268 MB, output 537 MB (805 MB); 51.5 GFLOP."""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "convolution"

BATCH, C_IN, C_OUT, LENGTH = 16, 64, 128, 65536
CPU_SIZE = {"BATCH": 4, "C_IN": 16, "C_OUT": 32, "LENGTH": 4096}  # the CPU backend's size (problems.sizes)
KERNEL, DILATION = 3, 4


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.left_pad = dilation * (kernel_size - 1)
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # output step t sees only inputs t, t - dilation, ..., never the future
        return self.conv(F.pad(x, (self.left_pad, 0)))


def get_inputs():
    return [torch.randn(BATCH, C_IN, LENGTH)]


def get_init_inputs():
    return [C_IN, C_OUT, KERNEL, DILATION]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 5)],
        [torch.randn(3, C_IN, 1001)],
        [torch.randn(2, 777, C_IN).transpose(1, 2)],
    ]
