"""Rotary position embedding (rotate-half form) applied to queries and keys laid out (batch, seq, heads, dim):
x * cos + rotate_half(x) * sin with cos/sin tables for base 10000. q, k and both outputs (8, 2048, 32, 128): 268 MB each."""
import torch
import torch.nn as nn

CATEGORY = "other_fusion"

BATCH, SEQ, HEADS, HEAD_DIM = 8, 2048, 32, 128
CPU_SIZE = {"BATCH": 1, "SEQ": 256, "HEADS": 8}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, head_dim: int, max_seq: int, base: float):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, dim=-1)
        return torch.cat([-second, first], dim=-1)

    def forward(self, q: torch.Tensor, k: torch.Tensor):
        seq = q.shape[1]
        cos = self.cos[:seq].unsqueeze(1)
        sin = self.sin[:seq].unsqueeze(1)
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin


def get_inputs():
    return [torch.randn(BATCH, SEQ, HEADS, HEAD_DIM), torch.randn(BATCH, SEQ, HEADS, HEAD_DIM)]


def get_init_inputs():
    return [HEAD_DIM, SEQ, 10000.0]


def get_test_inputs():
    return [
        [torch.randn(1, 1, 1, HEAD_DIM), torch.randn(1, 1, 1, HEAD_DIM)],
        [torch.randn(3, 37, 5, HEAD_DIM), torch.randn(3, 37, 2, HEAD_DIM)],  # fewer key heads
        [torch.randn(2, 4, 100, HEAD_DIM).transpose(1, 2), torch.randn(2, 100, 4, HEAD_DIM)],
    ]
