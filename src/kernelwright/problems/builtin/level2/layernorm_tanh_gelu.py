"""Pre-activation block: LayerNorm over the last dim (6144, learned weight and bias) then tanh-approximated GELU.
(8, 2048, 6144) fp32: 403 MB read, 403 MB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "norm_activation"

BATCH, SEQ, HIDDEN = 8, 2048, 6144
CPU_SIZE = {"BATCH": 2, "SEQ": 128, "HIDDEN": 3072}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return F.gelu(normed, approximate="tanh")


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, 1e-5]


def get_test_inputs():
    return [
        [torch.randn(5, HIDDEN)],
        [torch.randn(2, 3, 7, HIDDEN)],
        [torch.randn(HIDDEN, 13).t()],
    ]
