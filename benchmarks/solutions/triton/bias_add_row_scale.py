"""(x + bias) * scale with bias per column and scale per row, as one Triton kernel over x viewed
flat: column = i % cols, row = i // cols. x read once, y written once; bias and scale are small
and stay in cache. Offsets in int64. Blocks of 1024 on a GPU, 65536 in Triton's interpreter."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_scale_kernel(x_ptr, bias_ptr, scale_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(bias_ptr + offs % cols, mask=mask, other=0.0)
    s = tl.load(scale_ptr + offs // cols, mask=mask, other=0.0)
    tl.store(y_ptr + offs, (x + b) * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias, scale):
        x, bias, scale = x.contiguous(), bias.contiguous(), scale.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024 if x.is_cuda else 1 << 16
        if n:
            bias_scale_kernel[(triton.cdiv(n, block),)](x, bias, scale, y, n, x.shape[-1], BLOCK=block)
        return y
