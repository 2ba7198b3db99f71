"""Maxout layer: Linear 2048 -> 4096, max over groups of 4 consecutive features (-> 1024), then tanh.
x (16384, 2048): 134 MB; weight 34 MB; output 67 MB (235 MB in all); 275 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "gemm_epilogue"

ROWS, IN_FEATURES, UNITS, PIECES = 16384, 2048, 1024, 4
CPU_SIZE = {"ROWS": 512, "IN_FEATURES": 256, "UNITS": 128}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, in_features: int, units: int, pieces: int):
        super().__init__()
        self.pieces = pieces
        self.proj = nn.Linear(in_features, units * pieces)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.proj(x)
        z = z.view(*z.shape[:-1], -1, self.pieces).amax(dim=-1)
        return torch.tanh(z)


def get_inputs():
    return [torch.randn(ROWS, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, UNITS, PIECES]


def get_test_inputs():
    return [
        [torch.randn(7, IN_FEATURES)],
        [torch.randn(3, 21, IN_FEATURES)],
        [torch.randn(IN_FEATURES, 50).t()],
    ]
