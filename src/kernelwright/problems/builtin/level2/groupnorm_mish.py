"""GroupNorm (32 groups of 8 channels, affine) on NCHW feature maps followed by Mish, x * tanh(softplus(x)).
(64, 256, 80, 80) fp32: 419 MB read, 419 MB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "norm_activation"

BATCH, CHANNELS, HEIGHT, WIDTH, GROUPS = 64, 256, 80, 80, 32
CPU_SIZE = {"BATCH": 4, "CHANNELS": 64, "HEIGHT": 40, "WIDTH": 40}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels)
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 2.0)
            self.gn.bias.uniform_(-1.0, 1.0)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return F.mish(self.gn(feats))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [GROUPS, CHANNELS]


def get_test_inputs():
    return [
        [torch.randn(1, CHANNELS, 3, 3)],
        [torch.randn(3, CHANNELS, 13, 7)],
        [torch.randn(2, CHANNELS, 10, 10).to(memory_format=torch.channels_last)],
    ]
