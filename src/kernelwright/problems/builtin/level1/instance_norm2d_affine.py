"""InstanceNorm2d (per-sample, per-channel statistics) with learnable affine on (16, 96, 256, 256).
403 MB read, 403 MB written."""
import torch
import torch.nn as nn

CATEGORY = "normalization"

N, C, H, W = 16, 96, 256, 256
CPU_SIZE = {"N": 2, "C": 24, "H": 128, "W": 128}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, num_features, eps):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(num_features, eps=eps, affine=True)
        with torch.no_grad():
            self.inorm.weight.normal_(1.0, 0.4)
            self.inorm.bias.normal_(0.0, 0.4)

    def forward(self, x):
        return self.inorm(x)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C, 1e-5]


def get_test_inputs():
    x = torch.randn(2, C, 21, 42)
    return [[torch.randn(1, C, 5, 33)], [torch.randn(3, C, 17, 2)], [x[:, :, :, 1::2]]]
