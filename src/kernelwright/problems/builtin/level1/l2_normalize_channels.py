"""F.normalize: scale every (sample, position) vector to unit L2 norm over the channel dim 1
of a (64, 256, 8192) tensor. 537 MB read, 537 MB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "normalization"

BATCH, CHANNELS, LENGTH = 64, 256, 8192
CPU_SIZE = {"BATCH": 4, "CHANNELS": 64, "LENGTH": 2048}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, dim=1, eps=1e-12):
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x):
        return F.normalize(x, p=2.0, dim=self.dim, eps=self.eps)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [1, 1e-12]


def get_test_inputs():
    return [
        [torch.randn(3, 5, 333)],
        [torch.randn(1, 1000, 7)],
        [torch.randn(4, 50, 30).transpose(1, 2)],
    ]
