"""3-D max pooling over video features: 2x2x2 window, stride 2, on (8, 64, 32, 112, 112).
Input 822 MB, output (8, 64, 16, 56, 56) 103 MB (925 MB); memory-bound."""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "pooling"

BATCH, CHANNELS, FRAMES, HEIGHT, WIDTH = 8, 64, 32, 112, 112
CPU_SIZE = {"BATCH": 1, "CHANNELS": 16, "FRAMES": 8, "HEIGHT": 56, "WIDTH": 56}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, window: int):
        super().__init__()
        self.window = window

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        # ceil_mode keeps a last partial window along an odd-sized axis
        return F.max_pool3d(video, self.window, stride=self.window, ceil_mode=True)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, FRAMES, HEIGHT, WIDTH)]


def get_init_inputs():
    return [2]


def get_test_inputs():
    return [
        [torch.randn(1, 2, 3, 5, 7)],
        [torch.randn(2, 3, 8, 17, 9)],
    ]
