"""Inference-mode batch norm of an NCHW tensor with stored running statistics and affine parameters:
(32, 64, 224, 224) fp32. 411 MB read, 411 MB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "normalization"

N, C, H, W = 32, 64, 224, 224
CPU_SIZE = {"N": 4, "C": 32, "H": 56, "W": 56}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(channels).normal_(1.0, 0.3))
        self.bias = nn.Parameter(torch.empty(channels).normal_(0.0, 0.3))
        self.register_buffer("running_mean", torch.randn(channels) * 0.5)
        self.register_buffer("running_var", torch.rand(channels) * 1.5 + 0.5)

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=False, eps=self.eps)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C, 1e-5]


def get_test_inputs():
    return [
        [torch.randn(1, C, 7, 13)],
        [torch.randn(3, C, 33, 5)],
        [torch.randn(2, 9, 11, C).permute(0, 3, 1, 2)],
    ]
