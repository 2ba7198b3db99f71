"""Log-sum-exp of every row, torch.logsumexp(x, dim=-1), as one single-pass reduction CUDA kernel.

Eager reads the input twice (max, then the sum of shifted exponentials); this kernel reads every
row once from HBM with the online rule: each thread keeps a running pair (m, s), s being the sum of
exp(v - m) over what it has seen. With many rows (at least 16 per SM, as in the 65536 x 3072
benchmark) one warp owns a row: each lane issues 8 independent 16-byte streaming loads, takes the
maximum of those 32 values, rescales its sum once if the maximum grew, and adds their 32
exponentials (so about one expf per element); the lanes' pairs are combined with shuffles and lane 0
writes m + log(s). With few rows (the small test shapes) one block owns a row, sized to the row (32
to 1024 threads), with a shared-memory step across warps. The precise expf and logf are used. As in
torch, a row that is all -inf gives -inf and a row holding +inf gives +inf. Rows whose length is
not a multiple of 4 (3001), or a data pointer not 16-byte aligned, take the same kernels with
scalar loads; a strided input (the [::3] test view) is made contiguous first.
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

// (m, s) <- (m, s) combined with (mo, so); s sums exp(v - m) over the values it covers, and an
// empty part is (-inf, 0). A +inf maximum makes s NaN, which finish() turns into +inf.
__device__ __forceinline__ void combine(float& m, float& s, float mo, float so) {
    const float mn = fmaxf(m, mo);
    if (mn == -INFINITY) return;
    s = s * expf(m - mn) + so * expf(mo - mn);
    m = mn;
}

__device__ __forceinline__ float finish(float m, float s) {
    if (m == -INFINITY || m == INFINITY) return m;  // torch: log(0) + 0, log(inf) + 0
    return logf(s) + m;
}

// Fold N loaded values (out-of-row ones are -inf) into the running (m, s): one rescale at most.
template <int N>
__device__ __forceinline__ void fold(float& m, float& s, const float* v) {
    float mb = v[0];
#pragma unroll
    for (int k = 1; k < N; ++k) mb = fmaxf(mb, v[k]);
    if (mb == -INFINITY) return;  // nothing but -inf here: adds 0
    if (mb > m) {
        s *= expf(m - mb);  // 0 when m is still -inf
        m = mb;
    }
    float a = 0.0f;
    float b = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k += 2) {
        a += expf(v[k] - m);
        b += expf(v[k + 1] - m);
    }
    s += a + b;
}

// This thread's (m, s) over a row: thread t of nt takes access units t, t + nt, ... (float4s when
// VEC, floats otherwise), kUnroll loads at a time.
template <bool VEC>
__device__ __forceinline__ void row_partial(const float* __restrict__ xr, long cols, int t, int nt,
                                            float& m, float& s) {
    m = -INFINITY;
    s = 0.0f;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const long n4 = cols >> 2;
        for (long base = t; base < n4; base += (long)nt * kUnroll) {
            float v[4 * kUnroll];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const long i = base + (long)k * nt;
                const float4 q = i < n4 ? __ldcs(x4 + i)
                                        : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
                v[4 * k + 0] = q.x;
                v[4 * k + 1] = q.y;
                v[4 * k + 2] = q.z;
                v[4 * k + 3] = q.w;
            }
            fold<4 * kUnroll>(m, s, v);
        }
    } else {
        for (long base = t; base < cols; base += (long)nt * kUnroll) {
            float v[kUnroll];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const long i = base + (long)k * nt;
                v[k] = i < cols ? __ldcs(xr + i) : -INFINITY;
            }
            fold<kUnroll>(m, s, v);
        }
    }
}

__device__ __forceinline__ void warp_combine(float& m, float& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, o);
        const float so = __shfl_xor_sync(0xffffffffu, s, o);
        combine(m, s, mo, so);
    }
}

// One warp per row (grid-stride over rows); the row loop is uniform across each warp.
template <bool VEC>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
lse_rows_warp(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    const int lane = threadIdx.x & 31;
    const long first = (long)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    const long stride = (long)gridDim.x * kWarpsPerBlock;
    for (long row = first; row < rows; row += stride) {
        float m;
        float s;
        row_partial<VEC>(x + row * cols, cols, lane, 32, m, s);
        warp_combine(m, s);
        if (lane == 0) y[row] = finish(m, s);
    }
}

// One block per row (grid-stride over rows, uniform across the block); blockDim.x a multiple of 32.
template <bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
lse_rows_block(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    __shared__ float2 red[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    for (long row = blockIdx.x; row < rows; row += gridDim.x) {
        float m;
        float s;
        row_partial<VEC>(x + row * cols, cols, threadIdx.x, blockDim.x, m, s);
        warp_combine(m, s);
        if (lane == 0) red[warp] = make_float2(m, s);
        __syncthreads();
        if (warp == 0) {
            const float2 r = lane < nwarps ? red[lane] : make_float2(-INFINITY, 0.0f);
            m = r.x;
            s = r.y;
            warp_combine(m, s);
            if (lane == 0) y[row] = finish(m, s);
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
        lse_rows_warp<VEC><<<(unsigned)blocks, kWarpsPerBlock * 32, 0, stream>>>(x, y, rows, cols);
    } else {
        long threads = round_up32((units + kUnroll - 1) / kUnroll);
        threads = threads < 32 ? 32 : (threads > kMaxThreads ? kMaxThreads : threads);
        lse_rows_block<VEC><<<(unsigned)rows, (unsigned)threads, 0, stream>>>(x, y, rows, cols);
    }
}

}  // namespace

// y[r] = log(sum(exp(x[r, :]))) for a contiguous rows x cols fp32 matrix.
extern "C" int logsumexp_rows_forward(const float* x, float* y, long rows, long cols,
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
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        if y.numel() == 0:
            return y
        lib.logsumexp_rows_forward(x, y, y.numel(), x.shape[-1])
        return y
