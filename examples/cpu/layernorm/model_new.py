"""LayerNorm with a C++ kernel, OpenMP over rows (kernels/layernorm.cpp).

The parameters live in an nn.LayerNorm under the same attribute name as the reference (`ln`), so
the judge's weight copy lands in `ln.weight` and `ln.bias`; only its forward is replaced.
"""

import math
import pathlib

import torch
import torch.nn as nn

from kernelwright import runtime

lib = runtime.load(pathlib.Path(__file__).parent / "kernels" / "layernorm.cpp")


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        weight = self.ln.weight.contiguous()
        bias = self.ln.bias.contiguous()
        y = torch.empty_like(x)
        cols = math.prod(self.ln.normalized_shape)
        if x.numel() == 0:
            return y
        lib.layernorm_forward(x, weight, bias, y, x.numel() // cols, cols, float(self.ln.eps))
        return y
