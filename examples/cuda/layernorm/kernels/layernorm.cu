// LayerNorm over the last dimension, fp32: y = (x - mean) / sqrt(var + eps) * weight + bias.
//
// One block per row (grid-stride over rows). The row sits in registers: thread t holds elements
// t + j * blockDim.x (float4 units when the row is float4-aligned, floats otherwise), so x is read
// from HBM once and y written once. Two-pass statistics on the registers: the mean first, then the
// mean of squared deviations (exact, no cancellation for rows with a large mean). Rows wider than
// the register buffer (32768 floats; 16384 for the scalar path) take a looped three-read path.
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kMaxThreads = 1024;   // threads per block (and per row) at most
constexpr int kSmallThreads = 256;  // preferred block size when the row fits

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum; every thread gets the result. blockDim.x is a multiple of 32. Safe to call
// again at once: `red` is rewritten only after the second barrier, when warp 0 has read it, and
// `bcast` only after the first barrier of the next call, when every thread has read it.
__device__ __forceinline__ float block_sum(float v, float* red, float* bcast) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) *bcast = v;
    }
    __syncthreads();
    return *bcast;
}

__device__ __forceinline__ float4 affine4(float4 v, float mean, float rstd, float4 w, float4 b) {
    return make_float4(fmaf((v.x - mean) * rstd, w.x, b.x), fmaf((v.y - mean) * rstd, w.y, b.y),
                       fmaf((v.z - mean) * rstd, w.z, b.z), fmaf((v.w - mean) * rstd, w.w, b.w));
}

// Register path; the host uses it only for cols <= 32768, so in-row indices fit in int.
template <int VPT, bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
layernorm_rows_reg(const float* __restrict__ x, const float* __restrict__ w,
                   const float* __restrict__ b, float* __restrict__ y, long rows, long cols,
                   float eps) {
    constexpr int N = 4 * VPT;  // floats per thread
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
            for (int j = 0; j < VPT; ++j) {
                const int q = tid + j * nt;
                const float4 t = q < n ? __ldcs(x4 + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                v[4 * j + 0] = t.x;
                v[4 * j + 1] = t.y;
                v[4 * j + 2] = t.z;
                v[4 * j + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const int c = tid + j * nt;
                v[j] = c < n ? __ldcs(xr + c) : 0.0f;
            }
        }
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < N; ++j) s += v[j];  // out-of-row slots hold 0
        const float mean = block_sum(s, red, &bcast) * inv_cols;
        float d2 = 0.0f;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const bool valid = VEC ? (tid + (j / 4) * nt) < n : (tid + j * nt) < n;
            const float d = v[j] - mean;
            d2 += valid ? d * d : 0.0f;
        }
        const float var = block_sum(d2, red, &bcast) * inv_cols;
        const float rstd = rsqrtf(var + eps);
        if (VEC) {
            const float4* w4 = reinterpret_cast<const float4*>(w);
            const float4* b4 = reinterpret_cast<const float4*>(b);
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int j = 0; j < VPT; ++j) {
                const int q = tid + j * nt;
                if (q < n) {
                    const float4 t =
                        make_float4(v[4 * j + 0], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
                    __stcs(y4 + q, affine4(t, mean, rstd, __ldg(w4 + q), __ldg(b4 + q)));
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const int c = tid + j * nt;
                if (c < n) __stcs(yr + c, fmaf((v[j] - mean) * rstd, __ldg(w + c), __ldg(b + c)));
            }
        }
    }
}

// Rows too wide for registers: sum, squared deviations, then the output, each a pass over x.
__global__ void __launch_bounds__(kMaxThreads)
layernorm_rows_loop(const float* __restrict__ x, const float* __restrict__ w,
                    const float* __restrict__ b, float* __restrict__ y, long rows, long cols,
                    float eps) {
    __shared__ float red[32];
    __shared__ float bcast;
    const long nt = blockDim.x;
    const float inv_cols = 1.0f / (float)cols;
    for (long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float s = 0.0f;
        for (long c = threadIdx.x; c < cols; c += nt) s += __ldg(xr + c);
        const float mean = block_sum(s, red, &bcast) * inv_cols;
        float d2 = 0.0f;
        for (long c = threadIdx.x; c < cols; c += nt) {
            const float d = __ldg(xr + c) - mean;
            d2 += d * d;
        }
        const float rstd = rsqrtf(block_sum(d2, red, &bcast) * inv_cols + eps);
        for (long c = threadIdx.x; c < cols; c += nt) {
            __stcs(yr + c, fmaf((__ldcs(xr + c) - mean) * rstd, __ldg(w + c), __ldg(b + c)));
        }
    }
}

long round_up32(long v) { return (v + 31) / 32 * 32; }

// float4s per thread and threads per row for the register path; 0 if the row is too wide.
// Scalar rows stop at max_vpt = 4: 32 scalar loads per thread would spill.
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
void launch(const float* x, const float* w, const float* b, float* y, long rows, long cols,
            float eps, cudaStream_t stream) {
    int threads = 0;
    const int vpt = pick_vpt(cols, VEC ? 8 : 4, &threads);
    const unsigned grid = (unsigned)(rows < 2147483647L ? rows : 2147483647L);
    switch (vpt) {
        case 1:
            layernorm_rows_reg<1, VEC><<<grid, threads, 0, stream>>>(x, w, b, y, rows, cols, eps);
            break;
        case 2:
            layernorm_rows_reg<2, VEC><<<grid, threads, 0, stream>>>(x, w, b, y, rows, cols, eps);
            break;
        case 4:
            layernorm_rows_reg<4, VEC><<<grid, threads, 0, stream>>>(x, w, b, y, rows, cols, eps);
            break;
        case 8:
            if constexpr (VEC) {
                layernorm_rows_reg<8, VEC>
                    <<<grid, threads, 0, stream>>>(x, w, b, y, rows, cols, eps);
            }
            break;
        default:
            layernorm_rows_loop<<<grid, threads, 0, stream>>>(x, w, b, y, rows, cols, eps);
            break;
    }
}

}  // namespace

// y[r, :] = layernorm(x[r, :]) * weight + bias for a contiguous rows x cols fp32 matrix.
extern "C" int layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                                 long rows, long cols, float eps, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                           reinterpret_cast<uintptr_t>(weight) | reinterpret_cast<uintptr_t>(bias);
    if ((addr & 15) == 0 && cols % 4 == 0) {
        launch<true>(x, weight, bias, y, rows, cols, eps, stream);
    } else {
        launch<false>(x, weight, bias, y, rows, cols, eps, stream);
    }
    return (int)cudaGetLastError();
}
