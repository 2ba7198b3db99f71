"""Softmax over the last dimension in C++ (OpenMP over rows), source as a string constant.

Per row: the max, then exp(x - max) written to y while summing (in double), then a scale by the
reciprocal of the sum: x is read twice, y written and re-read once, all from cache for these rows.
"""

import torch
import torch.nn as nn

from kernelwright import runtime

CPP_SRC = r"""
#include <cmath>

// y[r, :] = softmax(x[r, :]) for a contiguous rows x cols fp32 matrix.
extern "C" int softmax_forward(const float* x, float* y, long rows, long cols) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -INFINITY;
        for (long c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        double s = 0.0;
        for (long c = 0; c < cols; ++c) {
            const float e = std::exp(xr[c] - m);
            yr[c] = e;
            s += e;
        }
        const float inv = (float)(1.0 / s);
        for (long c = 0; c < cols; ++c) yr[c] *= inv;
    }
    return 0;
}
"""

lib = runtime.load(CPP_SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1] if x.dim() > 0 else 1
        lib.softmax_forward(x, y, x.numel() // cols, cols)
        return y
