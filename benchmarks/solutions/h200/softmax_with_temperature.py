"""Softmax of logits / temperature along dim 1, F.softmax(logits * inv_temperature, dim=1), as one
fused CUDA kernel: logits read once, probabilities written once (eager writes and re-reads the
scaled logits, and its softmax reads them twice).

One block per row (grid-stride over rows), the row held in registers: for the 32000-wide rows of
the benchmark a block of 1024 threads holds 8 float4s per thread, all loaded with streaming loads
before any math. Each thread scales its values by 1 / temperature (the same fp32 product torch
forms), takes the maximum of its own values, turns them into exp(v - local max) with the precise
expf and sums them; one block reduction combines the (max, sum) pairs of all threads by the online
softmax rule (warp shuffles, then one shared-memory step), and each thread multiplies its
registers by exp(local max - row max) / row sum and stores them with float4 streaming stores. Rows
up to 32768 floats stay in registers (block sized to the row, 32 to 1024 threads); wider rows take
a looped path that reads the row twice. Rows whose width is not a multiple of 4 (the 31-wide test
rows), or pointers not 16-byte aligned, take the same paths with scalar accesses (registers up to
16384 floats a row). Dim 1 is moved last (a view; a no-op for the 2-D logits) and the input made
contiguous, so the transposed test view works; the result is given back in the input's layout of
dims. An all -inf row gives NaN, as in torch.
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

// (m, s) <- (m, s) combined with (mo, so); s sums exp(v - m) over the values it covers, and an
// empty part is (-inf, 0).
__device__ __forceinline__ void combine(float& m, float& s, float mo, float so) {
    const float mn = fmaxf(m, mo);
    if (mn == -INFINITY) return;
    s = s * expf(m - mn) + so * expf(mo - mn);
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

// Block-wide (max, sum) combination; every thread gets the result. blockDim.x is a multiple of 32.
// Safe to call again at once: `red` is rewritten only after the second barrier (warp 0 has read it
// by then), `bcast` only after the first barrier of the next call (every thread has read it).
__device__ __forceinline__ void block_combine(float& m, float& s, float2* red, float2* bcast) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    warp_combine(m, s);
    if (lane == 0) red[warp] = make_float2(m, s);
    __syncthreads();
    if (warp == 0) {
        const float2 v = lane < (int)(blockDim.x >> 5) ? red[lane] : make_float2(-INFINITY, 0.0f);
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

// One row per block (grid-stride over rows); thread t holds access units t + j * blockDim.x
// (float4s when VEC, floats otherwise), 4 * VPT floats in all; positions past the row hold -inf.
// The host uses this kernel only when blockDim.x * (units per thread) covers the row, and
// cols <= 32768, so in-row indices fit in int.
template <int VPT, bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
softmax_rows_reg(const float* __restrict__ x, float* __restrict__ y, long rows, long cols,
                 float inv_t) {
    constexpr int N = 4 * VPT;
    constexpr int U = VEC ? VPT : N;  // access units per thread
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
            for (int j = 0; j < U; ++j) {
                const int q = tid + j * nt;
                const float4 t = q < n ? __ldcs(x4 + q)
                                       : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
                v[4 * j + 0] = t.x * inv_t;
                v[4 * j + 1] = t.y * inv_t;
                v[4 * j + 2] = t.z * inv_t;
                v[4 * j + 3] = t.w * inv_t;
            }
        } else {
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int c = tid + j * nt;
                v[j] = (c < n ? __ldcs(xr + c) : -INFINITY) * inv_t;
            }
        }
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < N; ++j) m = fmaxf(m, v[j]);
        const float m_local = m;
        const float m_ref = m == -INFINITY ? 0.0f : m;  // no finite value here: every exp is 0
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            v[j] = expf(v[j] - m_ref);
            s += v[j];
        }
        block_combine(m, s, red, &bcast);
        // exp(v - M) / S = exp(v - m_local) * (exp(m_local - M) / S); an all -inf row gives NaN.
        const float scale = expf(m_local - m) / s;
        if (VEC) {
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int q = tid + j * nt;
                if (q < n) {
                    __stcs(y4 + q, make_float4(v[4 * j + 0] * scale, v[4 * j + 1] * scale,
                                               v[4 * j + 2] * scale, v[4 * j + 3] * scale));
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int c = tid + j * nt;
                if (c < n) __stcs(yr + c, v[j] * scale);
            }
        }
    }
}

// Rows too wide for registers: one read for the online (max, sum), one to write.
template <bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
softmax_rows_loop(const float* __restrict__ x, float* __restrict__ y, long rows, long cols,
                  float inv_t) {
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
                const float a = t.x * inv_t;
                const float b = t.y * inv_t;
                const float c = t.z * inv_t;
                const float d = t.w * inv_t;
                const float mo = fmaxf(fmaxf(a, b), fmaxf(c, d));
                if (mo == -INFINITY) continue;
                combine(m, s, mo, expf(a - mo) + expf(b - mo) + expf(c - mo) + expf(d - mo));
            }
        } else {
            for (long c = threadIdx.x; c < cols; c += nt) {
                const float t = __ldg(xr + c) * inv_t;
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
                __stcs(y4 + q, make_float4(expf(t.x * inv_t - m) * inv, expf(t.y * inv_t - m) * inv,
                                           expf(t.z * inv_t - m) * inv, expf(t.w * inv_t - m) * inv));
            }
        } else {
            for (long c = threadIdx.x; c < cols; c += nt) {
                __stcs(yr + c, expf(__ldcs(xr + c) * inv_t - m) * inv);
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
void launch(const float* x, float* y, long rows, long cols, float inv_t, cudaStream_t stream) {
    int threads = 0;
    const int vpt = pick_vpt(cols, VEC ? 8 : 4, &threads);
    const unsigned grid = (unsigned)(rows < 2147483647L ? rows : 2147483647L);
    switch (vpt) {
        case 1: softmax_rows_reg<1, VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols, inv_t); break;
        case 2: softmax_rows_reg<2, VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols, inv_t); break;
        case 4: softmax_rows_reg<4, VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols, inv_t); break;
        case 8:
            if constexpr (VEC) {
                softmax_rows_reg<8, VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols, inv_t);
            }
            break;
        default: softmax_rows_loop<VEC><<<grid, threads, 0, stream>>>(x, y, rows, cols, inv_t); break;
    }
}

}  // namespace

// y[r, :] = softmax(x[r, :] * inv_t) for a contiguous rows x cols fp32 matrix.
extern "C" int softmax_temperature_forward(const float* x, float* y, long rows, long cols,
                                           float inv_t, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
    if ((addr & 15) == 0 && cols % 4 == 0) {
        launch<true>(x, y, rows, cols, inv_t, stream);
    } else {
        launch<false>(x, y, rows, cols, inv_t, stream);
    }
    return (int)cudaGetLastError();
}
"""

lib = runtime.load(CUDA_SRC)


class ModelNew(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        if temperature <= 0:
            raise ValueError("temperature must be positive")
        self.inv_temperature = 1.0 / temperature

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        moved = logits.dim() != 2  # dim 1 is already the last dim of a matrix
        x = (logits.movedim(1, -1) if moved else logits).contiguous()
        y = torch.empty_like(x)
        if x.numel() > 0:
            cols = x.shape[-1]
            lib.softmax_temperature_forward(x, y, x.numel() // cols, cols, float(self.inv_temperature))
        return y.movedim(-1, 1) if moved else y
