"""Full (non-causal) attention written out: softmax(Q K^T / sqrt(d)) V with 4-D (batch, heads, seq, dim) tensors.
q, k, v, output (8, 16, 2048, 64): 67 MB each (268 MB); the score matrix is 2.1 GB if materialised; 137 GFLOP."""
import math

import torch
import torch.nn as nn

CATEGORY = "attention"

BATCH, HEADS, SEQ, HEAD_DIM = 8, 16, 2048, 64
CPU_SIZE = {"BATCH": 1, "HEADS": 4, "SEQ": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(1, 1, 1, 64), torch.randn(1, 1, 1, 64), torch.randn(1, 1, 1, 64)],
        [torch.randn(2, 3, 37, 64), torch.randn(2, 3, 301, 64), torch.randn(2, 3, 301, 64)],  # cross-attention
        [torch.randn(2, 40, 4, 128).transpose(1, 2), torch.randn(2, 4, 40, 128), torch.randn(2, 4, 40, 128)],
    ]
