"""Depthwise-separable convolution: depthwise 3x3 (128 groups, no bias), pointwise 1x1 128 -> 256 with bias,
then ReLU6. Input (32, 128, 96, 96): 151 MB; output 302 MB; 20 GFLOP."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "conv_epilogue"

BATCH, C_IN, C_OUT, SIZE = 32, 128, 256, 96
CPU_SIZE = {"BATCH": 2, "C_IN": 32, "C_OUT": 64, "SIZE": 48}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int):
        super().__init__()
        self.depthwise = nn.Conv2d(c_in, c_in, kernel, padding=kernel // 2, groups=c_in, bias=False)
        self.pointwise = nn.Conv2d(c_in, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(self.pointwise(self.depthwise(x)))


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT, 3]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 1, 9)],
        [torch.randn(3, C_IN, 15, 23)],
        [torch.randn(2, C_IN, 12, 12).to(memory_format=torch.channels_last)],
    ]
