"""ResNet-style stem: 7x7 stride-2 conv 3 -> 64 (padding 3, with bias), ReLU, then 3x3 stride-2 max pool (padding 1).
Images (192, 3, 224, 224): 116 MB; output (192, 64, 56, 56): 154 MB; 45 GFLOP."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "conv_epilogue"

BATCH, CHANNELS, WIDTH, IMAGE = 192, 3, 64, 224
CPU_SIZE = {"BATCH": 2, "WIDTH": 32, "IMAGE": 112}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, channels: int, width: int, kernel: int, pool: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, width, kernel, stride=2, padding=kernel // 2)
        self.pool = pool

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = F.relu(self.conv(images))
        return F.max_pool2d(features, self.pool, stride=2, padding=self.pool // 2)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, IMAGE, IMAGE)]


def get_init_inputs():
    return [CHANNELS, WIDTH, 7, 3]


def get_test_inputs():
    return [
        [torch.randn(1, CHANNELS, 9, 9)],
        [torch.randn(2, CHANNELS, 37, 51)],
        [torch.randn(3, 64, 64, CHANNELS).permute(0, 3, 1, 2)],
    ]
