"""2-D max pooling as in the ResNet stem: 3x3 window, stride 2, padding 1, on (256, 64, 112, 112).
Input 822 MB, output (256, 64, 56, 56) 206 MB (1028 MB); memory-bound."""

import torch
import torch.nn as nn

CATEGORY = "pooling"

BATCH, CHANNELS, HEIGHT, WIDTH = 256, 64, 112, 112
CPU_SIZE = {"BATCH": 8, "CHANNELS": 32, "HEIGHT": 56, "WIDTH": 56}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [3, 2, 1]


def get_test_inputs():
    return [
        [torch.randn(1, 3, 7, 7)],
        [torch.randn(2, 5, 33, 18)],
        [torch.randn(4, 10, 12, 6).transpose(2, 3)],
    ]
