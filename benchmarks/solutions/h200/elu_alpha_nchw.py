"""ELU with a configurable alpha, y = x if x > 0 else alpha * (exp(x) - 1), as one elementwise
CUDA kernel that reads x once and writes y once.

The math is torch's: x itself for x > 0, otherwise expm1f(x) * alpha (the precise expm1, which keeps
small negative inputs accurate). A grid-stride loop over float4s issues four 16-byte streaming loads
per thread before any math and stores with streaming stores; the 0..3 elements after the last whole
float4 are done by the first threads of block 0. The NCHW layout does not matter to an elementwise
op, so the tensor is treated as one flat array. A tensor whose data pointer is not 16-byte
aligned takes a scalar grid-stride kernel. Non-contiguous inputs (the strided test view) are made
contiguous first, so any shape and any strides give a result of x's shape.
"""

import torch
import torch.nn as nn

from kernelwright import runtime

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr long kMaxBlocks = 1L << 20;  // grid-stride beyond this many blocks

// torch's ELU (scale 1, input scale 1): x for x > 0, else expm1(x) * alpha.
__device__ __forceinline__ float elu(float x, float alpha) {
    return x > 0.0f ? x : expm1f(x) * alpha;
}

__device__ __forceinline__ float4 elu4(float4 v, float alpha) {
    return make_float4(elu(v.x, alpha), elu(v.y, alpha), elu(v.z, alpha), elu(v.w, alpha));
}

// x and y 16-byte aligned; n floats in all, n / 4 whole float4s and a tail of n % 4 floats.
__global__ void __launch_bounds__(kThreads)
elu_vec(const float* __restrict__ x, float* __restrict__ y, long n, float alpha) {
    const long n4 = n >> 2;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    const long stride = (long)gridDim.x * kThreads * kUnroll;
    for (long base = (long)blockIdx.x * kThreads * kUnroll + threadIdx.x; base < n4; base += stride) {
        float4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const long i = base + (long)u * kThreads;
            v[u] = i < n4 ? __ldcs(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const long i = base + (long)u * kThreads;
            if (i < n4) __stcs(y4 + i, elu4(v[u], alpha));
        }
    }
    const long tail = n - (n4 << 2);
    if (blockIdx.x == 0 && (long)threadIdx.x < tail) {
        const long i = (n4 << 2) + threadIdx.x;
        y[i] = elu(x[i], alpha);
    }
}

__global__ void __launch_bounds__(kThreads)
elu_scalar(const float* __restrict__ x, float* __restrict__ y, long n, float alpha) {
    const long stride = (long)gridDim.x * kThreads;
    for (long i = (long)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        __stcs(y + i, elu(__ldcs(x + i), alpha));
    }
}

long clamp_blocks(long blocks) { return blocks < 1 ? 1 : (blocks < kMaxBlocks ? blocks : kMaxBlocks); }

}  // namespace

// y[i] = x[i] > 0 ? x[i] : alpha * expm1(x[i]) for n contiguous floats.
extern "C" int elu_forward(const float* x, float* y, long n, float alpha, cudaStream_t stream) {
    if (n <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
    if ((addr & 15) == 0) {
        const long per_block = (long)kThreads * kUnroll;
        const long blocks = clamp_blocks(((n >> 2) + per_block - 1) / per_block);  // >= 1: the tail
        elu_vec<<<(unsigned)blocks, kThreads, 0, stream>>>(x, y, n, alpha);
    } else {
        const long blocks = clamp_blocks((n + kThreads - 1) / kThreads);
        elu_scalar<<<(unsigned)blocks, kThreads, 0, stream>>>(x, y, n, alpha);
    }
    return (int)cudaGetLastError();
}
"""

lib = runtime.load(CUDA_SRC)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.act = nn.ELU(alpha=alpha)  # holds alpha, as the reference's module does; never called

    def forward(self, feature_map):
        x = feature_map.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        lib.elu_forward(x, y, x.numel(), float(self.act.alpha))
        return y
