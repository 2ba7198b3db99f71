"""Batched matmul with torch.bmm: 128 independent (512 x 1024) @ (1024 x 768) products.
Inputs 268 MB + 403 MB, output 201 MB (872 MB); 103 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "matmul"

BATCH, M, K, N = 128, 512, 1024, 768
CPU_SIZE = {"BATCH": 8, "M": 128, "K": 256, "N": 192}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, lhs: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
        return torch.bmm(lhs, rhs)


def get_inputs():
    lhs = torch.randn(BATCH, M, K)
    rhs = torch.randn(BATCH, K, N)
    return [lhs, rhs]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(3, 17, 33), torch.randn(3, 33, 9)],
        [torch.randn(1, 130, 64), torch.randn(1, 64, 70)],
        [torch.randn(5, 24, 40).transpose(1, 2), torch.randn(5, 24, 31)],
        [torch.randn(9, 1, 50), torch.randn(9, 50, 1)],
    ]
