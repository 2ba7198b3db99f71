"""Outer product of two vectors by broadcasting: a[:, None] * b[None, :], a (16384,), b (12288,)
-> (16384, 12288). 0.1 MB read, 805 MB written."""
import torch
import torch.nn as nn

CATEGORY = "broadcast"

LEN_A = 16384
LEN_B = 12288
CPU_SIZE = {"LEN_A": 1024, "LEN_B": 768}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def forward(self, a, b):
        return a[:, None] * b[None, :]


def get_inputs():
    a = torch.randn(LEN_A)
    b = torch.randn(LEN_B)
    return [a, b]


def get_init_inputs():
    return []


def get_test_inputs():
    return [[torch.randn(7), torch.randn(1000)], [torch.randn(333), torch.randn(1)], [torch.randn(40)[::3], torch.randn(17)]]
