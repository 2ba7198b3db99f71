"""ResNet basic block (conv3x3-BN-ReLU-conv3x3-BN, identity shortcut, ReLU), BatchNorm in eval mode with
non-trivial running statistics. x (64, 128, 56, 56): 103 MB in, 103 MB out, 1.2 MB weights; 118 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "residual"

BATCH, CHANNELS, HEIGHT, WIDTH = 64, 128, 56, 56
CPU_SIZE = {"BATCH": 2, "CHANNELS": 32, "HEIGHT": 28, "WIDTH": 28}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.weight.normal_(1.0, 0.3)
                bn.bias.normal_(0.0, 0.2)
                bn.running_mean.normal_(0.0, 0.1)
                bn.running_var.uniform_(0.2, 0.6)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]


def get_test_inputs():
    return [
        [torch.randn(3, CHANNELS, 17, 23)],
        [torch.randn(1, CHANNELS, 1, 9)],
        [torch.randn(2, CHANNELS, 30, 14)[:, :, ::2]],
        [torch.randn(2, 15, 15, CHANNELS).permute(0, 3, 1, 2)],
    ]
