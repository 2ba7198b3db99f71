"""Broadcast elementwise: (x + bias) * scale with x (12288, 8192), bias (8192,) per column and
scale (12288, 1) per row. 403 MB + 0.08 MB read, 403 MB written."""
import torch
import torch.nn as nn

CATEGORY = "broadcast"

ROWS, COLS = 12288, 8192
CPU_SIZE = {"ROWS": 768, "COLS": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias, scale):
        return (x + bias) * scale


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(COLS), torch.randn(ROWS, 1)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(7, 1000), torch.randn(1000), torch.randn(7, 1)],
        [torch.randn(333, 5), torch.randn(5), torch.randn(333, 1)],
        [torch.randn(20, 9).t(), torch.randn(20), torch.randn(9, 1)],
    ]
