"""Maximum values over the last dimension of a 3-D tensor: (96, 2048, 1024) -> (96, 2048).
96 x 2048 x 1024 fp32: 805 MB read, 0.8 MB written."""
import torch
import torch.nn as nn

CATEGORY = "reduction"

B, ROWS, COLS = 96, 2048, 1024
CPU_SIZE = {"B": 8, "ROWS": 256, "COLS": 512}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        values, _ = torch.max(x, dim=-1)
        return values


def get_inputs():
    x = torch.randn(B, ROWS, COLS)
    return [x]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(2, 7, 1000)],
        [torch.randn(3, 5, 333)],
        [torch.randn(4, 9, 258)[:, :, ::2]],
    ]
