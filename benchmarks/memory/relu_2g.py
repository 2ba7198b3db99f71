"""A problem with multi-GiB data for benchmarks/memory_bench.py: ReLU of a 16384 x 32768 fp32 input
(2 GiB in, 2 GiB out), the shape of KernelBench's level 1 ReLU at a third of its size."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16384, 32768)]


def get_init_inputs():
    return []
