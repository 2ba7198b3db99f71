"""Transformer MLP up-projection: nn.Linear 4096 -> 8192 (with bias) then exact erf GELU, on 4 x 1024 tokens.
Input 67 MB, weight 134 MB, output 134 MB (335 MB in all); 275 GFLOP."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "gemm_epilogue"

BATCH, SEQ, D_MODEL, D_FF = 4, 1024, 4096, 8192
CPU_SIZE = {"BATCH": 1, "SEQ": 256, "D_MODEL": 512, "D_FF": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        with torch.no_grad():
            self.up.bias.normal_(0.0, 0.5)  # a bias large enough that dropping it shows

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.up(tokens), approximate="none")


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]


def get_init_inputs():
    return [D_MODEL, D_FF]


def get_test_inputs():
    return [
        [torch.randn(3, 37, D_MODEL)],
        [torch.randn(131, D_MODEL)],
        [torch.randn(2, 66, D_MODEL)[:, ::2]],
    ]
