"""Gated RMSNorm (as in Mamba-2): rmsnorm(x) * weight * silu(z) over the last dim, written out.
x and z (8192, 8192) fp32: 537 MB read, 268 MB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "norm_activation"

TOKENS, DIM = 8192, 8192
CPU_SIZE = {"TOKENS": 512, "DIM": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        inv_rms = torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return (x * inv_rms) * self.scale * F.silu(z)


def get_inputs():
    return [torch.randn(TOKENS, DIM), torch.randn(TOKENS, DIM)]


def get_init_inputs():
    return [DIM, 1e-5]


def get_test_inputs():
    return [
        [torch.randn(3, DIM), torch.randn(3, DIM)],
        [torch.randn(2, 9, DIM), torch.randn(2, 9, DIM)],
        [torch.randn(DIM, 6).t(), torch.randn(6, 2 * DIM)[:, ::2]],
    ]
