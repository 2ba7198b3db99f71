"""3-D convolution 16 -> 32 channels (3x3x3, padding 1) followed by a softmax over the channel dim
(per-voxel class probabilities). Input (8, 16, 32, 64, 64): 67 MB; output 134 MB; 29 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "conv_epilogue"

BATCH, C_IN, CLASSES, DEPTH, HEIGHT, WIDTH = 8, 16, 32, 32, 64, 64
CPU_SIZE = {"BATCH": 1, "C_IN": 4, "CLASSES": 16, "DEPTH": 8, "HEIGHT": 32, "WIDTH": 32}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, c_in: int, classes: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv3d(c_in, classes, kernel, padding=kernel // 2)

    def forward(self, volume: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.conv(volume), dim=1)


def get_inputs():
    return [torch.randn(BATCH, C_IN, DEPTH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [C_IN, CLASSES, 3]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 3, 5, 7)],
        [torch.randn(2, C_IN, 9, 17, 6)],
        [torch.randn(1, 4, 8, 10, C_IN).permute(0, 4, 1, 2, 3)],
    ]
