"""Grouped-query attention: 32 query heads share 8 key/value heads (each K/V head repeated for 4 query heads),
then softmax(Q K^T * scale) V. q and output (8, 32, 1024, 128): 134 MB each; k, v (8, 8, 1024, 128): 34 MB each; 137 GFLOP."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "attention"

BATCH, Q_HEADS, KV_HEADS, SEQ, HEAD_DIM = 8, 32, 8, 1024, 128
CPU_SIZE = {"BATCH": 1, "Q_HEADS": 8, "KV_HEADS": 2, "SEQ": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, q_heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.group = q_heads // kv_heads
        self.scale = head_dim ** -0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k = k.repeat_interleave(self.group, dim=1)
        v = v.repeat_interleave(self.group, dim=1)
        weights = F.softmax(torch.einsum("bhqd,bhkd->bhqk", q, k) * self.scale, dim=-1)
        return torch.einsum("bhqk,bhkd->bhqd", weights, v)


def get_inputs():
    return [
        torch.randn(BATCH, Q_HEADS, SEQ, HEAD_DIM),
        torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM),
        torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM),
    ]


def get_init_inputs():
    return [Q_HEADS, KV_HEADS, HEAD_DIM]


def get_test_inputs():
    return [
        [torch.randn(1, Q_HEADS, 3, HEAD_DIM), torch.randn(1, KV_HEADS, 3, HEAD_DIM), torch.randn(1, KV_HEADS, 3, HEAD_DIM)],
        [torch.randn(2, 4, 9, HEAD_DIM), torch.randn(2, 1, 70, HEAD_DIM), torch.randn(2, 1, 70, HEAD_DIM)],
        [torch.randn(1, 50, Q_HEADS, HEAD_DIM).transpose(1, 2), torch.randn(1, KV_HEADS, 50, HEAD_DIM),
         torch.randn(1, 50, KV_HEADS, HEAD_DIM).transpose(1, 2)],
    ]
