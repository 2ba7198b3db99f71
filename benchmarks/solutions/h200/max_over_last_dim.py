"""Maximum over the last dimension, torch.max(x, dim=-1).values, as one reduction CUDA kernel.

Each row is read once from HBM and one float is written per row. With many rows (at least 16 per
SM, as in the 96 x 2048 x 1024 benchmark: 196608 rows of 4 KB) one warp owns a row: each lane
issues 8 independent 16-byte streaming loads (the whole 1024-float row in one step) before folding
them into four per-component running maxima, the lanes are combined with shuffles and lane 0 writes
the row's maximum. With few rows (the small test shapes) one block owns a row, sized to the row (32
to 1024 threads), with the same per-thread loop and a shared-memory step across warps. Rows whose
length is not a multiple of 4 (333, and 129 for the strided test view, made contiguous first), or a
data pointer not 16-byte aligned, take the same kernels with scalar loads. Only the values are
returned, as the reference does; NaN propagation is not reproduced (fmaxf skips NaN).
"""

import torch
import torch.nn as nn

from kernelwright import runtime

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kWarpsPerBlock = 8;  // warp-per-row kernel: rows (warps) per block
constexpr int kUnroll = 8;         // loads a thread issues before it folds them in
constexpr int kMaxThreads = 1024;  // block-per-row kernel: threads per block at most

// This thread's running maximum over a row: thread t of nt takes access units t, t + nt, ...
// (float4s when VEC, floats otherwise), kUnroll loads at a time, into four independent maxima.
// Loads past the row's end read as -inf, the identity of max.
template <bool VEC>
__device__ __forceinline__ float row_partial(const float* __restrict__ xr, long cols, int t, int nt) {
    float m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const long n4 = cols >> 2;
        for (long base = t; base < n4; base += (long)nt * kUnroll) {
            float4 v[kUnroll];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const long i = base + (long)k * nt;
                v[k] = i < n4 ? __ldcs(x4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            }
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                m0 = fmaxf(m0, v[k].x);
                m1 = fmaxf(m1, v[k].y);
                m2 = fmaxf(m2, v[k].z);
                m3 = fmaxf(m3, v[k].w);
            }
        }
    } else {
        for (long base = t; base < cols; base += (long)nt * kUnroll) {
            float v[kUnroll];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const long i = base + (long)k * nt;
                v[k] = i < cols ? __ldcs(xr + i) : -INFINITY;
            }
#pragma unroll
            for (int k = 0; k < kUnroll; k += 4) {
                m0 = fmaxf(m0, v[k]);
                m1 = fmaxf(m1, v[k + 1]);
                m2 = fmaxf(m2, v[k + 2]);
                m3 = fmaxf(m3, v[k + 3]);
            }
        }
    }
    return fmaxf(fmaxf(m0, m1), fmaxf(m2, m3));
}

__device__ __forceinline__ float warp_max(float m) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}

// One warp per row (grid-stride over rows); the row loop is uniform across each warp.
template <bool VEC>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
max_rows_warp(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    const int lane = threadIdx.x & 31;
    const long first = (long)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    const long stride = (long)gridDim.x * kWarpsPerBlock;
    for (long row = first; row < rows; row += stride) {
        const float m = warp_max(row_partial<VEC>(x + row * cols, cols, lane, 32));
        if (lane == 0) y[row] = m;
    }
}

// One block per row (grid-stride over rows, uniform across the block); blockDim.x a multiple of 32.
template <bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
max_rows_block(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    __shared__ float red[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    for (long row = blockIdx.x; row < rows; row += gridDim.x) {
        float m = warp_max(row_partial<VEC>(x + row * cols, cols, threadIdx.x, blockDim.x));
        if (lane == 0) red[warp] = m;
        __syncthreads();
        if (warp == 0) {
            m = warp_max(lane < nwarps ? red[lane] : -INFINITY);
            if (lane == 0) y[row] = m;
        }
        __syncthreads();  // red is read before the next row writes it
    }
}

long round_up32(long v) { return (v + 31) / 32 * 32; }

int sm_count() {
    static int cached = 0;
    if (cached == 0) {
        int dev = 0;
        int sms = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        cached = sms > 0 ? sms : 1;
    }
    return cached;
}

template <bool VEC>
void launch(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
    const long units = VEC ? cols >> 2 : cols;
    if (rows >= 16L * sm_count()) {
        long blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
        blocks = blocks < (1L << 20) ? blocks : (1L << 20);
        max_rows_warp<VEC><<<(unsigned)blocks, kWarpsPerBlock * 32, 0, stream>>>(x, y, rows, cols);
    } else {
        long threads = round_up32((units + kUnroll - 1) / kUnroll);
        threads = threads < 32 ? 32 : (threads > kMaxThreads ? kMaxThreads : threads);
        max_rows_block<VEC><<<(unsigned)rows, (unsigned)threads, 0, stream>>>(x, y, rows, cols);
    }
}

}  // namespace

// y[r] = max(x[r, :]) for a contiguous rows x cols fp32 matrix.
extern "C" int max_last_dim_forward(const float* x, float* y, long rows, long cols,
                                    cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    if ((reinterpret_cast<uintptr_t>(x) & 15) == 0 && cols % 4 == 0) {
        launch<true>(x, y, rows, cols, stream);
    } else {
        launch<false>(x, y, rows, cols, stream);
    }
    return (int)cudaGetLastError();
}
"""

lib = runtime.load(CUDA_SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        if y.numel() == 0:
            return y
        lib.max_last_dim_forward(x, y, y.numel(), x.shape[-1])
        return y
