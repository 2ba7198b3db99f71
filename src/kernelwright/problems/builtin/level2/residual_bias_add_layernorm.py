"""Post-attention add & norm: h = x + bias + residual, returns (LayerNorm(h), h) as a fused kernel would
(the updated residual stream is kept). x, residual, both outputs (16, 4096, 1024): 268 MB each (1074 MB)."""
import torch
import torch.nn as nn

CATEGORY = "norm_activation"

BATCH, SEQ, D_MODEL = 16, 4096, 1024
CPU_SIZE = {"BATCH": 2, "SEQ": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(d_model))
        self.norm = nn.LayerNorm(d_model, eps=eps)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        h = x + self.bias + residual
        return self.norm(h), h


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL), torch.randn(BATCH, SEQ, D_MODEL)]


def get_init_inputs():
    return [D_MODEL, 1e-12]


def get_test_inputs():
    return [
        [torch.randn(7, D_MODEL), torch.randn(7, D_MODEL)],
        [torch.randn(3, 5, D_MODEL), torch.randn(3, 5, D_MODEL)],
        [torch.randn(2, D_MODEL, 9).transpose(1, 2), torch.randn(2, 9, D_MODEL)],
    ]
