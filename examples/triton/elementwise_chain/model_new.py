"""y = gelu(x * scale + shift) * sigmoid(x) in one Triton kernel: x read once, y written once, where
eager runs five passes over memory. Solves examples/cpu/elementwise_chain/problem.py."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def kw_gelu_sigmoid_kernel(x_ptr, y_ptr, n, scale, shift, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m, other=0.0)
    z = x * scale + shift
    gelu = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))  # exact gelu, as F.gelu's default
    sig = 1.0 / (1.0 + tl.exp(-x))
    tl.store(y_ptr + i, gelu * sig, mask=m)


class ModelNew(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n:
            kw_gelu_sigmoid_kernel[(triton.cdiv(n, 1024),)](x, y, n, float(self.scale), float(self.shift), BLOCK=1024)
        return y
