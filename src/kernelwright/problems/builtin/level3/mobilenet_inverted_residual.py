"""MobileNetV2 inverted residual block (stride 1): 1x1 expand x6 + BN + ReLU6, depthwise 3x3 + BN + ReLU6,
1x1 linear projection + BN, identity shortcut; BatchNorm in eval mode with redrawn running statistics.
x (128, 64, 56, 56): 103 MB in, 103 MB out (206 MB); 42 GFLOP, 0.6 GB per expanded activation."""

import torch
import torch.nn as nn

CATEGORY = "residual"

BATCH, CHANNELS, HEIGHT, WIDTH, EXPANSION = 128, 64, 56, 56, 6
CPU_SIZE = {"BATCH": 4, "CHANNELS": 16, "HEIGHT": 28, "WIDTH": 28}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, channels, expansion):
        super().__init__()
        hidden = channels * expansion
        self.block = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, channels, 1, bias=False),
            nn.BatchNorm2d(channels),
        )
        with torch.no_grad():
            for m in self.block.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.weight.normal_(1.0, 0.25)
                    m.bias.normal_(0.0, 0.2)
                    m.running_mean.normal_(0.0, 0.1)
                    m.running_var.uniform_(0.05, 0.4)

    def forward(self, x):
        return x + self.block(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, EXPANSION]


def get_test_inputs():
    return [
        [torch.randn(3, CHANNELS, 13, 27)],
        [torch.randn(1, CHANNELS, 2, 1)],
        [torch.randn(2, 19, 11, CHANNELS).permute(0, 3, 1, 2)],
    ]
