"""Tall-skinny GEMM: 131072 activation rows of width 1024 projected by a learned 1024 x 96 weight.
X is 537 MB, W 0.4 MB, Y 50 MB (588 MB); 25.8 GFLOP, so streaming X and the narrow N both matter."""

import torch
import torch.nn as nn

CATEGORY = "matmul"

ROWS, K, N = 131072, 1024, 96
CPU_SIZE = {"ROWS": 4096, "K": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / in_features ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def get_inputs():
    return [torch.randn(ROWS, K)]


def get_init_inputs():
    return [K, N]


def get_test_inputs():
    return [[torch.randn(7, K)], [torch.randn(1001, K)], [torch.randn(2 * 333, K)[::2]]]
