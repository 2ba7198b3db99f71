"""Mean absolute response per position: mean over channels of |x * w_c + b_c|, reducing the middle dim.
x (2048, 96, 1024) fp32: 805 MB read; output (2048, 1024): 8 MB."""
import torch
import torch.nn as nn

CATEGORY = "elementwise_reduction"

BATCH, CHANNELS, LENGTH = 2048, 96, 1024
CPU_SIZE = {"BATCH": 32, "LENGTH": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(channels, 1))
        self.b = nn.Parameter(torch.randn(channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.abs(x * self.w + self.b).mean(dim=1)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [CHANNELS]


def get_test_inputs():
    return [
        [torch.randn(1, CHANNELS, 7)],
        [torch.randn(5, CHANNELS, 333)],
        [torch.randn(3, 50, CHANNELS).transpose(1, 2)],
    ]
