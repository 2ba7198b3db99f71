"""ELU with a configurable alpha (1.5) on an NCHW feature map (32, 96, 128, 256).
403 MB read, 403 MB written."""
import torch
import torch.nn as nn

CATEGORY = "activation"

N, C, H, W = 32, 96, 128, 256
CPU_SIZE = {"N": 4, "C": 24, "H": 64, "W": 128}  # the CPU backend's size (problems.sizes)
ALPHA = 1.5


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.act = nn.ELU(alpha=alpha)

    def forward(self, feature_map):
        return self.act(feature_map)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [ALPHA]


def get_test_inputs():
    return [
        [torch.randn(1, 3, 7, 11)],
        [torch.randn(2, 5, 1, 333)],
        [torch.randn(2, 4, 6, 10)[:, :, :, ::2]],
    ]
