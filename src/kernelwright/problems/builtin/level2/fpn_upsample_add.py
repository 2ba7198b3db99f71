"""Feature-pyramid top-down merge: the coarser map is upsampled 2x (nearest) and added to the finer lateral map.
top (16, 256, 80, 80): 105 MB; lateral and output (16, 256, 160, 160): 419 MB each (943 MB in all)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "other_fusion"

BATCH, CHANNELS, FINE = 16, 256, 160
CPU_SIZE = {"BATCH": 2, "CHANNELS": 64, "FINE": 80}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, factor: int):
        super().__init__()
        self.factor = factor

    def forward(self, top: torch.Tensor, lateral: torch.Tensor) -> torch.Tensor:
        return lateral + F.interpolate(top, scale_factor=self.factor, mode="nearest")


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, FINE // 2, FINE // 2), torch.randn(BATCH, CHANNELS, FINE, FINE)]


def get_init_inputs():
    return [2]


def get_test_inputs():
    return [
        [torch.randn(1, 3, 1, 1), torch.randn(1, 3, 2, 2)],
        [torch.randn(2, 5, 7, 9), torch.randn(2, 5, 14, 18)],
        [torch.randn(2, 6, 11, 4).permute(0, 3, 1, 2), torch.randn(2, 4, 12, 22)],
    ]
