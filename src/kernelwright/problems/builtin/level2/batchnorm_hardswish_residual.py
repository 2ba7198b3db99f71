"""Inference BatchNorm2d (running statistics) + hardswish, then a skip connection is added.
x and skip (96, 256, 56, 56): 308 MB each; output 308 MB (925 MB in all)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "norm_activation"

BATCH, CHANNELS, SIZE = 96, 256, 56
CPU_SIZE = {"BATCH": 8, "CHANNELS": 64, "SIZE": 28}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, channels: int, eps: float, momentum: float):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, eps=eps, momentum=momentum)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.3, 3.0)
            self.bn.weight.normal_(1.0, 0.4)
            self.bn.bias.normal_(0.0, 0.4)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        out = F.hardswish(self.bn(x))
        return out + skip


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE), torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, 1e-3, 0.01]


def get_test_inputs():
    return [
        [torch.randn(1, CHANNELS, 3, 5), torch.randn(1, CHANNELS, 3, 5)],
        [torch.randn(2, CHANNELS, 11, 9), torch.randn(2, CHANNELS, 11, 9)],
        [torch.randn(2, 7, 7, CHANNELS).permute(0, 3, 1, 2), torch.randn(2, CHANNELS, 7, 7)],
    ]
