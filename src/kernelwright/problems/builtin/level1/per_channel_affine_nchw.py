"""Per-channel affine transform of an NCHW tensor with (C, 1, 1) parameters: x * gamma + beta,
x (64, 48, 192, 192). 453 MB read, 453 MB written."""
import torch
import torch.nn as nn

CATEGORY = "broadcast"

N, C, H, W = 64, 48, 192, 192
CPU_SIZE = {"N": 4, "C": 16, "H": 96, "W": 96}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.gamma = nn.Parameter(torch.randn(channels, 1, 1))
        self.beta = nn.Parameter(torch.randn(channels, 1, 1))

    def forward(self, x):
        return x * self.gamma + self.beta


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C]


def get_test_inputs():
    return [
        [torch.randn(1, C, 7, 9)],
        [torch.randn(3, C, 1, 333)],
        [torch.randn(2, 5, 6, C).permute(0, 3, 1, 2)],
    ]
