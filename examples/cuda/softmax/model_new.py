"""Softmax over the last dimension: one block per row, the row held in registers.

Each element is read from HBM once and written once. A thread keeps up to 32 floats of its row
in registers (8 float4 loads), takes the max of its own values, turns them into exp(v - local max)
and sums them; one block reduction combines the (max, sum) pairs of all threads (the online-softmax
rule), and each thread rescales its registers and stores them with float4 stores. Rows too wide
for 1024 threads x 32 floats (more than 32768) take a looped two-read path. Rows whose width is
not a multiple of 4, or that are not 16-byte aligned, take the same paths with scalar accesses
(registers up to 16384 floats a row, the looped path beyond).
"""

import torch
import torch.nn as nn

from kernelwright import runtime

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kMaxThreads = 1024;     // threads per block (and per row) at most
constexpr int kSmallThreads = 256;    // preferred block size when the row fits
constexpr float kLog2e = 1.4426950408889634f;

// exp(v - m) by the base-2 exponential; v - m is formed first, exactly where it matters.
__device__ __forceinline__ float exp_shifted(float v, float m) {
    return exp2f((v - m) * kLog2e);
}

// (m, s) <- (m, s) combined with (mo, so); s is a sum of exp(v - m) over the values it covers.
// An empty part is (-inf, 0). A row containing +inf yields NaN, as torch does.
__device__ __forceinline__ void combine(float& m, float& s, float mo, float so) {
    const float mn = fmaxf(m, mo);
    if (mn == -INFINITY) return;
    s = s * exp_shifted(m, mn) + so * exp_shifted(mo, mn);
    m = mn;
}

__device__ __forceinline__ void warp_combine(float& m, float& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, o);
        const float so = __shfl_xor_sync(0xffffffffu, s, o);
        combine(m, s, mo, so);
    }
}

// Block-wide (max, sum) reduction; every thread gets the result. blockDim.x is a multiple of 32.
// Safe to call again at once: `red` is rewritten only after the second barrier, when warp 0
// has finished reading it, and `bcast` only after the first barrier of the next call.
__device__ __forceinline__ void block_combine(float& m, float& s, float2* red, float2* bcast) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    warp_combine(m, s);
    if (lane == 0) red[warp] = make_float2(m, s);
    __syncthreads();
    if (warp == 0) {
        const int nwarps = blockDim.x >> 5;
        const float2 v = lane < nwarps ? red[lane] : make_float2(-INFINITY, 0.0f);
        m = v.x;
        s = v.y;
        warp_combine(m, s);
        if (lane == 0) *bcast = make_float2(m, s);
    }
    __syncthreads();
    const float2 r = *bcast;
    m = r.x;
    s = r.y;
}

// One row per block (grid-stride over rows); thread t holds elements t + j * blockDim.x
// (float4 units when VEC, floats otherwise), VPT float4 worth of registers in all. The host
// uses this kernel only for cols <= 32768, so in-row indices fit in int.
template <int VPT, bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
softmax_rows_reg(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    constexpr int N = 4 * VPT;
    __shared__ float2 red[32];
    __shared__ float2 bcast;
    const int nt = blockDim.x;
    const int tid = threadIdx.x;
    const int n = VEC ? (int)(cols >> 2) : (int)cols;  // row length in access units
    for (long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float v[N];
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll
            for (int j = 0; j < VPT; ++j) {
                const int q = tid + j * nt;
                const float4 t = q < n ? __ldcs(x4 + q)
                                       : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
                v[4 * j + 0] = t.x;
                v[4 * j + 1] = t.y;
                v[4 * j + 2] = t.z;
                v[4 * j + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const int c = tid + j * nt;
                v[j] = c < n ? __ldcs(xr + c) : -INFINITY;
            }
        }
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < N; ++j) m = fmaxf(m, v[j]);
        const float m_local = m;
        const float m_ref = m == -INFINITY ? 0.0f : m;  // all -inf (or no elements): exps are 0
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            v[j] = exp_shifted(v[j], m_ref);
            s += v[j];
        }
        block_combine(m, s, red, &bcast);
        // exp(v - M) / S = exp(v - m_local) * exp(m_local - M) / S; an all -inf row gives NaN.
        const float scale = exp_shifted(m_local, m) / s;
        if (VEC) {
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int j = 0; j < VPT; ++j) {
                const int q = tid + j * nt;
                if (q < n) {
                    __stcs(y4 + q, make_float4(v[4 * j + 0] * scale, v[4 * j + 1] * scale,
                                               v[4 * j + 2] * scale, v[4 * j + 3] * scale));
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const int c = tid + j * nt;
                if (c < n) __stcs(yr + c, v[j] * scale);
            }
        }
    }
}

// Rows too wide for registers: one pass for the online (max, sum), one to write.
template <bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
softmax_rows_loop(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    __shared__ float2 red[32];
    __shared__ float2 bcast;
    const long nt = blockDim.x;
    for (long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float m = -INFINITY;
        float s = 0.0f;
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            for (long q = threadIdx.x; q < (cols >> 2); q += nt) {
                const float4 t = __ldg(x4 + q);
                const float mo = fmaxf(fmaxf(t.x, t.y), fmaxf(t.z, t.w));
                if (mo == -INFINITY) continue;
                const float so = exp_shifted(t.x, mo) + exp_shifted(t.y, mo) +
                                 exp_shifted(t.z, mo) + exp_shifted(t.w, mo);
                combine(m, s, mo, so);
            }
        } else {
            for (long c = threadIdx.x; c < cols; c += nt) {
                const float t = __ldg(xr + c);
                if (t != -INFINITY) combine(m, s, t, 1.0f);
            }
        }
        block_combine(m, s, red, &bcast);
        const float inv = 1.0f / s;
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            float4* y4 = reinterpret_cast<float4*>(yr);
            for (long q = threadIdx.x; q < (cols >> 2); q += nt) {
                const float4 t = __ldcs(x4 + q);
                __stcs(y4 + q, make_float4(exp_shifted(t.x, m) * inv, exp_shifted(t.y, m) * inv,
                                           exp_shifted(t.z, m) * inv, exp_shifted(t.w, m) * inv));
            }
        } else {
            for (long c = threadIdx.x; c < cols; c += nt) {
                __stcs(yr + c, exp_shifted(__ldcs(xr + c), m) * inv);
            }
        }
    }
}

long round_up32(long v) { return (v + 31) / 32 * 32; }

// Registers per thread (in float4 units) and threads per row for the register path; 0 if the
// row is too wide for it. Scalar rows stop at max_vpt = 4: 32 scalar loads per thread spill.
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
void launch(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
    int threads = 0;
    const int vpt = pick_vpt(cols, VEC ? 8 : 4, &threads);
    const unsigned grid = (unsigned)(rows < 2147483647L ? rows : 2147483647L);
    switch (vpt) {
        case 1: softmax_rows_reg<1, VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols); break;
        case 2: softmax_rows_reg<2, VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols); break;
        case 4: softmax_rows_reg<4, VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols); break;
        case 8:
            if constexpr (VEC) {
                softmax_rows_reg<8, VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols);
            }
            break;
        default: softmax_rows_loop<VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols); break;
    }
}

}  // namespace

// y[r, :] = softmax(x[r, :]) for a contiguous rows x cols fp32 matrix.
extern "C" int softmax_forward(const float* x, float* y, long rows, long cols,
                               cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
    const bool aligned = (addr & 15) == 0;
    if (aligned && cols % 4 == 0) {
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1] if x.dim() > 0 else 1
        lib.softmax_forward(x, y, x.numel() // cols, cols)
        return y
