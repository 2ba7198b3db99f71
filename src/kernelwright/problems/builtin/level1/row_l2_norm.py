"""Euclidean (L2) norm of every row of a matrix: (49152, 4096) -> (49152,).
805 MB read, 0.2 MB written."""
import torch
import torch.nn as nn

CATEGORY = "reduction"

ROWS, DIM = 49152, 4096
CPU_SIZE = {"ROWS": 1024, "DIM": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, order: float = 2.0):
        super().__init__()
        self.order = order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, ord=self.order, dim=1)


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [2.0]


def get_test_inputs():
    rows = torch.randn(2000, 31)
    return [[torch.randn(7, 1000)], [torch.randn(513, 3)], [rows.t()]]
