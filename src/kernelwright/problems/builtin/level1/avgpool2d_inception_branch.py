"""3x3 average pooling with stride 1 and padding 1 that keeps the map size (an Inception pooling branch);
padded cells are left out of each average (count_include_pad=False). (256, 288, 35, 35): 361 MB in, 361 MB out."""

import torch
import torch.nn.functional as F
import torch.nn as nn

CATEGORY = "pooling"

BATCH, CHANNELS, SIDE = 256, 288, 35
CPU_SIZE = {"BATCH": 8, "CHANNELS": 96}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIDE, SIDE)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [[torch.randn(1, 1, 1, 1)], [torch.randn(3, 7, 5, 11)], [torch.randn(2, 288, 36, 36)[:, :, 1:, 1:]]]
