"""Euclidean distance between matching embedding rows, sqrt(sum((x - y)^2) + eps) over the last dim.
x and y (16, 4096, 2048) fp32: 1074 MB read, 0.3 MB written."""
import torch
import torch.nn as nn

CATEGORY = "elementwise_reduction"

BATCH, SEQ, DIM = 16, 4096, 2048
CPU_SIZE = {"BATCH": 2, "SEQ": 256, "DIM": 512}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        diff = x - y
        return torch.sqrt(torch.sum(diff * diff, dim=-1) + self.eps)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM), torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [1e-6]


def get_test_inputs():
    return [
        [torch.randn(7, 1000), torch.randn(7, 1000)],
        [torch.randn(2, 3, 333), torch.randn(2, 3, 333)],
        [torch.randn(5, 400, 9).transpose(1, 2), torch.randn(5, 9, 400)],
    ]
