"""Sum of a 3-D tensor over its middle dimension, keeping it: (64, 4096, 1024) -> (64, 1, 1024).
64 x 4096 x 1024 fp32: 1074 MB read, 0.26 MB written."""
import torch
import torch.nn as nn

CATEGORY = "reduction"

BATCH, LENGTH, FEATURES = 64, 4096, 1024
CPU_SIZE = {"BATCH": 4, "LENGTH": 512, "FEATURES": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.sum(dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(BATCH, LENGTH, FEATURES)]


def get_init_inputs():
    return [1]


def get_test_inputs():
    cases = [[torch.randn(*shape)] for shape in ((3, 333, 7), (5, 17, 1001))]
    cases.append([torch.randn(6, 130, 40).transpose(1, 2)])
    return cases
