"""GroupNorm with 32 groups over a (32, 256, 112, 112) feature map, non-trivial affine parameters.
411 MB read, 411 MB written."""
import torch
import torch.nn as nn

CATEGORY = "normalization"

BATCH = 32
CHANNELS = 256
HEIGHT = WIDTH = 112
CPU_SIZE = {"BATCH": 4, "CHANNELS": 64, "HEIGHT": 56, "WIDTH": 56}  # the CPU backend's size (problems.sizes)
GROUPS = 32


class Model(nn.Module):
    def __init__(self, num_groups, num_channels):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, num_channels)
        with torch.no_grad():
            self.gn.weight.uniform_(0.25, 2.0)
            self.gn.bias.normal_(0.0, 1.0)

    def forward(self, features):
        return self.gn(features)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [GROUPS, CHANNELS]


def get_test_inputs():
    return [
        [torch.randn(1, CHANNELS, 7, 9)],
        [torch.randn(3, CHANNELS, 15, 1)],
        [torch.randn(2, CHANNELS, 10, 26)[..., ::3]],
    ]
