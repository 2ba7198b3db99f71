"""Causal self-attention with the mask built from torch.triu: future keys filled with -inf before the softmax.
q, k, v, output (4, 16, 2048, 128): 67 MB each (268 MB); 137 GFLOP counted (the dense product, mask ignored)."""
import torch
import torch.nn as nn

CATEGORY = "attention"

BATCH, HEADS, SEQ, HEAD_DIM = 4, 16, 2048, 128
CPU_SIZE = {"BATCH": 1, "HEADS": 4, "SEQ": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = 1.0 / head_dim ** 0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        future = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=q.device), diagonal=1)
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(future, float("-inf"))
        return torch.softmax(att, dim=-1) @ v


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM) for _ in range(3)]


def get_init_inputs():
    return [HEAD_DIM]


def get_test_inputs():
    return [
        [torch.randn(1, 1, 1, HEAD_DIM) for _ in range(3)],
        [torch.randn(2, 3, 77, HEAD_DIM) for _ in range(3)],
        [torch.randn(1, 33, 2, HEAD_DIM).transpose(1, 2) for _ in range(3)],
    ]
