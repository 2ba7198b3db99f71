"""Reverse cumulative sum over time: the final candidate of the workspace in
benchmarks/workspaces/cumsum_reverse_time (written by hand there; its history is in
benchmarks/results/workspace_h200.md), copied here unchanged below this note.

Reverse cumulative sum over time, step 5: step 4's idea pushed further. The serial chain of
round trips to memory is what bounds a thread (4096 / 16 = 256 of them in step 4), so each thread
now keeps two batches of 32 rows in flight: it loads the next batch before it adds and stores the
current one (software pipelining), halving the round trips and overlapping them with the stores.
Same order of additions as steps 2 and 4."""

import torch
import torch.nn as nn

from kernelwright import runtime

SRC = r"""
#include <cuda_runtime.h>

constexpr int R = 32;  // rows per batch; two batches in flight

__device__ __forceinline__ void load_rows(float (&v)[R], const float* __restrict__ xp, long start, long F) {
#pragma unroll
    for (int i = 0; i < R; ++i) v[i] = __ldcs(xp + (start + i) * F);  // rows start .. start + R - 1
}

__global__ void __launch_bounds__(128)
rcumsum_pipelined(const float* __restrict__ x, float* __restrict__ y, long T, long F, long cols) {
    const long col = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const long b = col / F, f = col % F;
    const float* xp = x + b * T * F + f;
    float* yp = y + b * T * F + f;
    const long nb = T / R;       // full batches, from the end: batch k is rows [T - (k + 1) R, T - k R)
    const long rem = T - nb * R;  // rows [0, rem) are left for the scalar tail
    float acc = 0.0f;
    float cur[R], nxt[R];
    if (nb > 0) load_rows(cur, xp, T - R, F);
    for (long k = 0; k < nb; ++k) {
        const long base = T - (k + 1) * R;
        if (k + 1 < nb) load_rows(nxt, xp, base - R, F);
#pragma unroll
        for (int i = R - 1; i >= 0; --i) {
            acc += cur[i];
            __stcs(yp + (base + i) * F, acc);
        }
#pragma unroll
        for (int i = 0; i < R; ++i) cur[i] = nxt[i];
    }
    for (long s = rem - 1; s >= 0; --s) {
        acc += xp[s * F];
        yp[s * F] = acc;
    }
}

extern "C" int rcumsum(const float* x, float* y, long B, long T, long F, cudaStream_t stream) {
    const long cols = B * F;
    if (cols == 0 || T == 0) return 0;
    const int threads = 128;
    const long blocks = (cols + threads - 1) / threads;
    rcumsum_pipelined<<<blocks, threads, 0, stream>>>(x, y, T, F, cols);
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
