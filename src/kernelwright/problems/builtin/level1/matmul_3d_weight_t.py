"""A batch of token sequences times a transposed weight: (16, 512, 4096) @ W^T with W stored as 3072 x 4096.
X 134 MB, W 50 MB, output 101 MB (285 MB); 206 GFLOP (a bias-free linear layer written as a matmul)."""

import torch
import torch.nn as nn

CATEGORY = "matmul"

BATCH, SEQ, D_IN, D_OUT = 16, 512, 4096, 3072
CPU_SIZE = {"BATCH": 2, "SEQ": 128, "D_IN": 512, "D_OUT": 384}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, w.transpose(0, 1))


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_IN), torch.randn(D_OUT, D_IN)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(2, 7, 100), torch.randn(37, 100)],
        [torch.randn(1, 333, 48), torch.randn(5, 48)],
        [torch.randn(3, 20, 64)[:, ::2], torch.randn(64, 96).t()],
    ]
