"""Running peak of price series via cummax: the drawdown from the peak so far (fp32) and the step
where that peak was set (int64; on ties the later step, as torch.cummax does), over 4096 series of 16384 steps.
268 MB read, 268 + 537 MB written (1074 MB)."""

import torch
import torch.nn as nn

CATEGORY = "scan"

SERIES, STEPS = 4096, 16384
CPU_SIZE = {"SERIES": 256, "STEPS": 2048}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, prices: torch.Tensor):
        peak, peak_step = torch.cummax(prices, dim=-1)
        drawdown = peak - prices
        return drawdown, peak_step


def get_inputs():
    return [torch.randn(SERIES, STEPS)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [[torch.randn(3, 7777)], [torch.randn(1000, 2)], [torch.randn(64, 9).t()], [torch.randn(2, 5, 300)]]
