"""Soak problem (benchmarks/soak_bench.py): y = 2 x + 1 over 2048 x 1024 fp32 (8 MiB in, 8 MiB out).

Small on purpose: the soak judges 300 verdicts, and what it measures is the service's handling of
faults, not the kernel.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(2048, 1024, dtype=torch.float32)]


def get_init_inputs():
    return []
