"""Attention probabilities with heads folded into the batch: softmax(bmm(q, k^T) * scale) over the keys.
q, k (256, 1024, 64): 67 MB each; probabilities (256, 1024, 1024): 1074 MB; 34 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "attention"

BATCH_HEADS, SEQ, HEAD_DIM = 256, 1024, 64
CPU_SIZE = {"BATCH_HEADS": 8, "SEQ": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        return scores.softmax(dim=-1)


def get_inputs():
    return [torch.randn(BATCH_HEADS, SEQ, HEAD_DIM), torch.randn(BATCH_HEADS, SEQ, HEAD_DIM)]


def get_init_inputs():
    return [HEAD_DIM]


def get_test_inputs():
    return [
        [torch.randn(1, 1, HEAD_DIM), torch.randn(1, 7, HEAD_DIM)],
        [torch.randn(3, 45, HEAD_DIM), torch.randn(3, 333, HEAD_DIM)],
        [torch.randn(2, HEAD_DIM, 50).transpose(1, 2), torch.randn(2, 50, HEAD_DIM)],
    ]
