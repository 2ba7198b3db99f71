"""C = alpha * (A @ B) + R: a plain matmul whose result is scaled and added to a residual, no parameters.
A (6144, 3072), B (3072, 6144), R and C (6144, 6144): 453 MB in all; 232 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "gemm_epilogue"

M, K, N = 6144, 3072, 6144
CPU_SIZE = {"M": 512, "K": 256, "N": 512}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, a: torch.Tensor, b: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        product = torch.matmul(a, b)
        return product * self.alpha + residual


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N), torch.randn(M, N)]


def get_init_inputs():
    return [0.125]


def get_test_inputs():
    return [
        [torch.randn(5, 300), torch.randn(300, 7), torch.randn(5, 7)],
        [torch.randn(129, 64), torch.randn(33, 64).t(), torch.randn(129, 33)],  # B transposed
        [torch.randn(70, 257), torch.randn(257, 45), torch.randn(45, 70).t()],  # residual transposed
    ]
