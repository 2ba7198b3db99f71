"""Square matrix multiply, fp32: C = A @ B with M = N = K = 256, a size for the CPU backend."""

import torch
import torch.nn as nn

M = N = K = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.float32), torch.randn(K, N, dtype=torch.float32)]


def get_init_inputs():
    return []


def get_test_inputs():
    """Further shapes for correctness only: sizes that are not multiples of the tile (scalar and
    float4 paths), a tiny product and a non-contiguous B."""
    return [
        [torch.randn(127, 61, dtype=torch.float32), torch.randn(61, 255, dtype=torch.float32)],
        [torch.randn(200, 68, dtype=torch.float32), torch.randn(68, 132, dtype=torch.float32)],
        [torch.randn(1, 5, dtype=torch.float32), torch.randn(5, 3, dtype=torch.float32)],
        [torch.randn(96, 80, dtype=torch.float32), torch.randn(160, 80, dtype=torch.float32).t()],
    ]
