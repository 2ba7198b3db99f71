"""SwiGLU feed-forward gate: silu(x @ Wg^T) * (x @ Wu^T) with two bias-free projections 2048 -> 5632.
x (2, 2048, 2048): 34 MB; two weights 92 MB; output 92 MB (218 MB in all); 189 GFLOP."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "gemm_epilogue"

BATCH, SEQ, HIDDEN, INTERMEDIATE = 2, 2048, 2048, 5632
CPU_SIZE = {"BATCH": 1, "SEQ": 256, "HIDDEN": 256, "INTERMEDIATE": 704}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = F.silu(self.gate_proj(x))
        return gate * self.up_proj(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE]


def get_test_inputs():
    return [
        [torch.randn(1, 17, HIDDEN)],
        [torch.randn(3, 5, 41, HIDDEN)],
        [torch.randn(2 * HIDDEN, 19).t()[:, ::2]],
    ]
