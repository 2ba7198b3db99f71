"""RMSNorm written out: x * rsqrt(mean(x^2, last dim) + eps) * weight, on (8, 4096, 4096).
537 MB read, 537 MB written."""
import torch
import torch.nn as nn

CATEGORY = "normalization"

BATCH, TOKENS, DIM = 8, 4096, 4096
CPU_SIZE = {"BATCH": 2, "TOKENS": 256, "DIM": 2048}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(mean_square + self.eps) * self.weight


def get_inputs():
    return [torch.randn(BATCH, TOKENS, DIM)]


def get_init_inputs():
    return [DIM, 1e-6]


def get_test_inputs():
    return [[torch.randn(7, DIM)], [torch.randn(3, 5, DIM)], [torch.randn(DIM, 9).t()]]
