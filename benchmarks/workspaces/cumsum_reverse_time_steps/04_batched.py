"""Reverse cumulative sum over time, step 4. Check 2 (one thread per column, 0.368 ms) beat the
slab-blocked check 3 (0.390 ms); ncu showed check 2 at 12 % occupancy and 60 % DRAM throughput:
32768 threads, each a serial walk over 4096 rows, so it is bound by how many loads each thread has
in flight. Here each thread loads 16 rows into registers before it adds and stores them (streaming
cache hints: the data is touched once), and blocks of 128 threads spread the 256 blocks over all
132 SMs. The additions stay in the same order as check 2 (exact against torch)."""

import torch
import torch.nn as nn

from kernelwright import runtime

SRC = r"""
#include <cuda_runtime.h>

constexpr int R = 16;  // rows loaded ahead per step

__global__ void __launch_bounds__(128)
rcumsum_batched(const float* __restrict__ x, float* __restrict__ y, long T, long F, long cols) {
    const long col = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const long b = col / F, f = col % F;
    const float* xp = x + b * T * F + f;
    float* yp = y + b * T * F + f;
    float acc = 0.0f;
    long t = T;  // rows [t, T) are done
    while (t >= R) {
        float v[R];
#pragma unroll
        for (int i = 0; i < R; ++i) v[i] = __ldcs(xp + (t - 1 - i) * F);
#pragma unroll
        for (int i = 0; i < R; ++i) {
            acc += v[i];
            __stcs(yp + (t - 1 - i) * F, acc);
        }
        t -= R;
    }
    for (long s = t - 1; s >= 0; --s) {
        acc += xp[s * F];
        yp[s * F] = acc;
    }
}

extern "C" int rcumsum(const float* x, float* y, long B, long T, long F, cudaStream_t stream) {
    const long cols = B * F;
    if (cols == 0 || T == 0) return 0;
    const int threads = 128;
    const long blocks = (cols + threads - 1) / threads;
    rcumsum_batched<<<blocks, threads, 0, stream>>>(x, y, T, F, cols);
    return (int)cudaGetLastError();
}
"""


lib = runtime.load(SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, rewards: torch.Tensor) -> torch.Tensor:
        x = rewards.contiguous()
        y = torch.empty_like(x)
        B, T, F = x.shape
        lib.rcumsum(x, y, B, T, F)
        return y
