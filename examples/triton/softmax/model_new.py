"""Softmax over the last dimension in Triton: one program per row, two passes over the row in
chunks of BLOCK. The first keeps a running maximum and a sum rescaled to it (online softmax), so
rows of any width fit; the second writes exp(x - max) / sum. Solves examples/cuda/softmax/problem.py."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def kw_softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * cols
    yr = y_ptr + row * cols
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for c in range(0, cols, BLOCK):
        v = tl.load(xr + c + offs, mask=c + offs < cols, other=float("-inf"))
        m_new = tl.maximum(m, v)
        seen = m_new != float("-inf")  # a lane that has seen no element yet adds nothing
        s = tl.where(seen, s * tl.exp(m - m_new) + tl.exp(v - m_new), 0.0)
        m = m_new
    row_max = tl.max(m, 0)
    row_sum = tl.sum(tl.where(m != float("-inf"), s * tl.exp(m - row_max), 0.0), 0)
    inv = 1.0 / row_sum
    for c in range(0, cols, BLOCK):
        mask = c + offs < cols
        v = tl.load(xr + c + offs, mask=mask, other=0.0)
        tl.store(yr + c + offs, tl.exp(v - row_max) * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1] if x.dim() > 0 else 1
        rows = x.numel() // cols
        block = min(4096, triton.next_power_of_2(cols))
        kw_softmax_kernel[(rows,)](x, y, cols, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return y
