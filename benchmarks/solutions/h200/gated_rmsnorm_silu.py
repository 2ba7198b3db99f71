"""Gated RMSNorm (Mamba-2), y = (x * rsqrt(mean(x^2) + eps)) * scale * silu(z) over the last dim,
as one fused CUDA kernel.

Eager makes about seven passes over memory (x * x, mean, rsqrt, three products, silu); this kernel
reads x and z once each and writes y once: one block per row (grid-stride over rows), x's row held
in registers. For the 8192-wide rows of the benchmark a block of 512 threads holds 4 float4s of x
per thread, all loaded with streaming loads before any math; each thread sums its squares, one
block reduction (warp shuffles, then one shared-memory step) gives the row's sum, and every thread
forms r = rsqrt(sum / cols + eps), then reads z at its own positions (float4 streaming loads) and
stores ((x * r) * scale) * (z / (1 + expf(-z))), torch's order of operations and its silu, with
float4 streaming stores; the scale (32 KB, cache resident) is read with read-only loads. Rows up to
16384 floats stay in registers (block sized to the row, 32 to 1024 threads); wider rows take a
looped path that reads x twice. Rows whose width is not a multiple of 4, or pointers not 16-byte
aligned, take the same paths with scalar accesses. Non-contiguous inputs (the transposed x and the
strided z of the third test case) are made contiguous first; leading dims are flattened into rows.
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

// torch's silu: z / (1 + exp(-z)).
__device__ __forceinline__ float silu(float z) { return z / (1.0f + expf(-z)); }

// The reference's order: ((x * inv_rms) * scale) * silu(z).
__device__ __forceinline__ float gate1(float v, float r, float w, float z) { return ((v * r) * w) * silu(z); }

__device__ __forceinline__ float4 gate4(float4 v, float r, float4 w, float4 z) {
    return make_float4(gate1(v.x, r, w.x, z.x), gate1(v.y, r, w.y, z.y), gate1(v.z, r, w.z, z.z),
                       gate1(v.w, r, w.w, z.w));
}

// One row per block (grid-stride over rows); thread t holds x's access units t + j * blockDim.x
// (float4s when VEC, floats otherwise), 4 * VPT floats in all; z is read at the same positions
// after the reduction. The host uses this kernel only when blockDim.x * (units per thread) covers
// the row, and cols <= 16384, so in-row indices fit in int.
template <int VPT, bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
gated_rows_reg(const float* __restrict__ x, const float* __restrict__ z,
               const float* __restrict__ w, float* __restrict__ y, long rows, long cols, float eps) {
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
        const float* zr = z + row * cols;
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
            const float4* z4 = reinterpret_cast<const float4*>(zr);
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int q = tid + j * nt;
                if (q < n) {
                    const float4 t = make_float4(v[4 * j + 0], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
                    __stcs(y4 + q, gate4(t, r, __ldg(w4 + q), __ldcs(z4 + q)));
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int c = tid + j * nt;
                if (c < n) __stcs(yr + c, gate1(v[j], r, __ldg(w + c), __ldcs(zr + c)));
            }
        }
    }
}

// Rows too wide for registers: one read of x for the sum of squares, one of x and z to write.
template <bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
gated_rows_loop(const float* __restrict__ x, const float* __restrict__ z,
                const float* __restrict__ w, float* __restrict__ y, long rows, long cols, float eps) {
    __shared__ float red[32];
    __shared__ float bcast;
    const long nt = blockDim.x;
    const float inv_cols = 1.0f / (float)cols;
    for (long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        const float* zr = z + row * cols;
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
            const float4* z4 = reinterpret_cast<const float4*>(zr);
            const float4* w4 = reinterpret_cast<const float4*>(w);
            float4* y4 = reinterpret_cast<float4*>(yr);
            for (long q = threadIdx.x; q < (cols >> 2); q += nt) {
                __stcs(y4 + q, gate4(__ldcs(x4 + q), r, __ldg(w4 + q), __ldcs(z4 + q)));
            }
        } else {
            for (long c = threadIdx.x; c < cols; c += nt) {
                __stcs(yr + c, gate1(__ldcs(xr + c), r, __ldg(w + c), __ldcs(zr + c)));
            }
        }
    }
}

long round_up32(long v) { return (v + 31) / 32 * 32; }

// float4s per thread (VPT) and threads per row for the register path; 0 if the row is too wide.
// Both paths stop at max_vpt = 4 (16 floats of x a thread, and as many of z while they are used).
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
void launch(const float* x, const float* z, const float* w, float* y, long rows, long cols, float eps,
            cudaStream_t stream) {
    int threads = 0;
    const int vpt = pick_vpt(cols, 4, &threads);
    const unsigned grid = (unsigned)(rows < 2147483647L ? rows : 2147483647L);
    switch (vpt) {
        case 1: gated_rows_reg<1, VEC><<<grid, threads, 0, stream>>>(x, z, w, y, rows, cols, eps); break;
        case 2: gated_rows_reg<2, VEC><<<grid, threads, 0, stream>>>(x, z, w, y, rows, cols, eps); break;
        case 4: gated_rows_reg<4, VEC><<<grid, threads, 0, stream>>>(x, z, w, y, rows, cols, eps); break;
        default: gated_rows_loop<VEC><<<grid, threads, 0, stream>>>(x, z, w, y, rows, cols, eps); break;
    }
}

}  // namespace

// y[r, c] = x[r, c] * rsqrt(mean(x[r, :]^2) + eps) * w[c] * silu(z[r, c]) for contiguous
// rows x cols matrices x, z and y.
extern "C" int gated_rmsnorm_silu_forward(const float* x, const float* z, const float* w, float* y,
                                          long rows, long cols, float eps, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(z) |
                           reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(w);
    if ((addr & 15) == 0 && cols % 4 == 0) {
        launch<true>(x, z, w, y, rows, cols, eps, stream);
    } else {
        launch<false>(x, z, w, y, rows, cols, eps, stream);
    }
    return (int)cudaGetLastError();
}
"""

lib = runtime.load(CUDA_SRC)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        z = z.contiguous()
        scale = self.scale.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        if z.shape != x.shape:
            raise ValueError(f"x and z must have the same shape, got {tuple(x.shape)} and {tuple(z.shape)}")
        cols = x.shape[-1]
        if scale.numel() != cols:
            raise ValueError(f"x's last dim must equal the scale's size {scale.numel()}, got {cols}")
        lib.gated_rmsnorm_silu_forward(x, z, scale, y, x.numel() // cols, cols, float(self.eps))
        return y
