"""Large square GEMM in strict fp32: C = A @ B with M = N = K = 6144.
A, B and C are 151 MB each (453 MB in all); 464 GFLOP, so it is compute-bound."""

import torch
import torch.nn as nn

CATEGORY = "matmul"

M = N = K = 6144
CPU_SIZE = {"M": 512, "N": 512, "K": 512}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []


def get_test_inputs():
    # ragged sizes that are not tile multiples, a thin inner dimension, and a transposed (column-major) B
    return [
        [torch.randn(129, 67), torch.randn(67, 250)],
        [torch.randn(3, 1000), torch.randn(1000, 5)],
        [torch.randn(80, 96), torch.randn(200, 96).t()],
    ]
