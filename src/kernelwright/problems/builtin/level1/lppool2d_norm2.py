"""Power-average (LP) pooling with p = 2: (sum over a 3x3 window of x^2)^(1/2), stride 2, no padding.
Input (48, 192, 128, 128) 604 MB, output (48, 192, 63, 63) 146 MB (750 MB); memory-bound."""

import torch
import torch.nn as nn

CATEGORY = "pooling"

BATCH, CHANNELS, HEIGHT, WIDTH = 48, 192, 128, 128
CPU_SIZE = {"BATCH": 4, "CHANNELS": 32, "HEIGHT": 64, "WIDTH": 64}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, norm_type: float, kernel_size: int, stride: int):
        super().__init__()
        self.lp = nn.LPPool2d(norm_type, kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lp(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [2.0, 3, 2]


def get_test_inputs():
    return [[torch.randn(1, 1, 3, 3)], [torch.randn(5, 3, 10, 27)]]
