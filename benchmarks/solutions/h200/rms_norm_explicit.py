"""RMSNorm over the last dim, y = x * rsqrt(mean(x^2) + eps) * weight, as one fused CUDA kernel.

Eager makes four passes (pow, mean, rsqrt and add, two multiplies); this kernel reads x once and
writes y once: one block per row (grid-stride over rows), the row held in registers. For the
4096-wide rows of the benchmark a block of 256 threads holds 4 float4s per thread, all loaded with
streaming loads before any math; each thread sums its squares, one block reduction (warp shuffles,
then one shared-memory step) gives the row's sum, and every thread forms r = rsqrt(sum / cols + eps)
and stores (x * r) * weight (torch's order of the two products) with float4 streaming stores; the
weight (16 KB, cache resident) is read with read-only loads. Rows from 1 to 32768 floats stay in
registers (block sized to the row, 32 to 1024 threads); wider rows take a looped two-read path.
Rows whose width is not a multiple of 4, or pointers not 16-byte aligned, take the same paths with
scalar accesses (registers up to 16384 floats a row). Non-contiguous inputs (the transposed test
view) are made contiguous first; any leading dims are flattened into rows.
"""

import torch
import torch.nn as nn

from kernelwright import runtime

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kMaxThreads = 1024;   // threads per block (and per row) at most
constexpr int kSmallThreads = 256;  // preferred block size when the row fits

// Block-wide sum; every thread gets the result. blockDim.x is a multiple of 32. Safe to call again
// at once: `red` is rewritten only after the second barrier (warp 0 has read it by then), `bcast`
// only after the first barrier of the next call (every thread has read it by then).
__device__ __forceinline__ float block_sum(float v, float* red, float* bcast) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) *bcast = v;
    }
    __syncthreads();
    return *bcast;
}

__device__ __forceinline__ float4 norm4(float4 v, float r, float4 w) {
    return make_float4((v.x * r) * w.x, (v.y * r) * w.y, (v.z * r) * w.z, (v.w * r) * w.w);
}

// One row per block (grid-stride over rows); thread t holds access units t + j * blockDim.x
// (float4s when VEC, floats otherwise), 4 * VPT floats in all. The host uses this kernel only when
// blockDim.x * (units per thread) covers the row, and cols <= 32768, so in-row indices fit in int.
template <int VPT, bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
rms_rows_reg(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
             long rows, long cols, float eps) {
    constexpr int N = 4 * VPT;
    constexpr int U = VEC ? VPT : N;  // access units per thread
    __shared__ float red[32];
    __shared__ float bcast;
    const int nt = blockDim.x;
    const int tid = threadIdx.x;
    const int n = VEC ? (int)(cols >> 2) : (int)cols;  // row length in access units
    const float inv_cols = 1.0f / (float)cols;
    for (long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float v[N];
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int q = tid + j * nt;
                const float4 t = q < n ? __ldcs(x4 + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                v[4 * j + 0] = t.x;
                v[4 * j + 1] = t.y;
                v[4 * j + 2] = t.z;
                v[4 * j + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int c = tid + j * nt;
                v[j] = c < n ? __ldcs(xr + c) : 0.0f;
            }
        }
        float s0 = 0.0f;
        float s1 = 0.0f;
#pragma unroll
        for (int j = 0; j < N; j += 2) {
            s0 = fmaf(v[j], v[j], s0);
            s1 = fmaf(v[j + 1], v[j + 1], s1);
        }
        const float ss = block_sum(s0 + s1, red, &bcast);
        const float r = rsqrtf(ss * inv_cols + eps);
        if (VEC) {
            const float4* w4 = reinterpret_cast<const float4*>(w);
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int q = tid + j * nt;
                if (q < n) {
                    const float4 t = make_float4(v[4 * j + 0], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
                    __stcs(y4 + q, norm4(t, r, __ldg(w4 + q)));
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int c = tid + j * nt;
                if (c < n) __stcs(yr + c, (v[j] * r) * __ldg(w + c));
            }
        }
    }
}

// Rows too wide for registers: one read for the sum of squares, one to write.
template <bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
rms_rows_loop(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
              long rows, long cols, float eps) {
    __shared__ float red[32];
    __shared__ float bcast;
    const long nt = blockDim.x;
    const float inv_cols = 1.0f / (float)cols;
    for (long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float s = 0.0f;
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            for (long q = threadIdx.x; q < (cols >> 2); q += nt) {
                const float4 t = __ldg(x4 + q);
                s = fmaf(t.x, t.x, s);
                s = fmaf(t.y, t.y, s);
                s = fmaf(t.z, t.z, s);
                s = fmaf(t.w, t.w, s);
            }
        } else {
            for (long c = threadIdx.x; c < cols; c += nt) {
                const float t = __ldg(xr + c);
                s = fmaf(t, t, s);
            }
        }
        const float r = rsqrtf(block_sum(s, red, &bcast) * inv_cols + eps);
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            const float4* w4 = reinterpret_cast<const float4*>(w);
            float4* y4 = reinterpret_cast<float4*>(yr);
            for (long q = threadIdx.x; q < (cols >> 2); q += nt) {
                __stcs(y4 + q, norm4(__ldcs(x4 + q), r, __ldg(w4 + q)));
            }
        } else {
            for (long c = threadIdx.x; c < cols; c += nt) {
                __stcs(yr + c, (__ldcs(xr + c) * r) * __ldg(w + c));
            }
        }
    }
}

long round_up32(long v) { return (v + 31) / 32 * 32; }

// float4s per thread (VPT) and threads per row for the register path; 0 if the row is too wide.
// Scalar rows stop at max_vpt = 4 (16 scalar registers a thread).
int pick_vpt(long cols, int max_vpt, int* threads) {
    for (int vpt = 1; vpt <= max_vpt; vpt *= 2) {
        if (cols <= (long)kSmallThreads * 4 * vpt) {
            *threads = (int)round_up32((cols + 4 * vpt - 1) / (4 * vpt));
            return vpt;
        }
    }
    if (cols <= (long)kMaxThreads * 4 * max_vpt) {
        *threads = (int)round_up32((cols + 4 * max_vpt - 1) / (4 * max_vpt));
        return max_vpt;
    }
    *threads = kMaxThreads;
    return 0;
}

template <bool VEC>
void launch(const float* x, const float* w, float* y, long rows, long cols, float eps,
            cudaStream_t stream) {
    int threads = 0;
    const int vpt = pick_vpt(cols, VEC ? 8 : 4, &threads);
    const unsigned grid = (unsigned)(rows < 2147483647L ? rows : 2147483647L);
    switch (vpt) {
        case 1: rms_rows_reg<1, VEC><<<grid, threads, 0, stream>>>(x, w, y, rows, cols, eps); break;
        case 2: rms_rows_reg<2, VEC><<<grid, threads, 0, stream>>>(x, w, y, rows, cols, eps); break;
        case 4: rms_rows_reg<4, VEC><<<grid, threads, 0, stream>>>(x, w, y, rows, cols, eps); break;
        case 8:
            if constexpr (VEC) {
                rms_rows_reg<8, VEC><<<grid, threads, 0, stream>>>(x, w, y, rows, cols, eps);
            }
            break;
        default: rms_rows_loop<VEC><<<grid, threads, 0, stream>>>(x, w, y, rows, cols, eps); break;
    }
}

}  // namespace

// y[r, c] = x[r, c] * rsqrt(mean(x[r, :]^2) + eps) * w[c] for a contiguous rows x cols matrix.
extern "C" int rms_norm_forward(const float* x, const float* w, float* y, long rows, long cols,
                                float eps, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                           reinterpret_cast<uintptr_t>(w);
    if ((addr & 15) == 0 && cols % 4 == 0) {
        launch<true>(x, w, y, rows, cols, eps, stream);
    } else {
        launch<false>(x, w, y, rows, cols, eps, stream);
    }
    return (int)cudaGetLastError();
}
"""

lib = runtime.load(CUDA_SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        weight = self.weight.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1]
        if weight.numel() != cols:
            raise ValueError(f"x's last dim must equal the weight's size {weight.numel()}, got {cols}")
        lib.rms_norm_forward(x, weight, y, x.numel() // cols, cols, float(self.eps))
        return y
