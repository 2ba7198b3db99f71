"""Broadcast elementwise, y = (x + bias) * scale with bias per column and scale per row, as one
CUDA kernel: x read once, y written once (eager runs two kernels and writes a temporary).

x is viewed as rows x cols (cols its last dim; scale holds one value per row). The grid is
two-dimensional: blockIdx.x and threadIdx.x pick one column unit (a float4 of four columns, or one
column), whose bias the thread loads once into registers; blockIdx.y picks a band of 8 rows, which
the thread loads with 8 independent streaming loads (and their 8 row scales, the same address for
the whole warp) before computing and storing (grid-stride over row bands past 65535 bands). No
index division is needed. The rounding follows torch's: the sum x + bias is rounded to fp32, then
multiplied by the scale. The float4 path needs cols % 4 == 0
and x, y and bias 16-byte aligned; any other shape (the 333 x 5 and transposed 9 x 20 test inputs)
takes the same kernel with one float per column unit. Non-contiguous inputs are made contiguous
first.
"""

import torch
import torch.nn as nn

from kernelwright import runtime

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kMaxThreads = 256;  // threads per block, along the columns
constexpr int kRows = 8;          // rows a thread loads before it computes: loads in flight

template <bool VEC> struct Unit { using T = float; };
template <> struct Unit<true> { using T = float4; };

// torch's two steps: x + b rounded to fp32, then times s (an add feeding a multiply: no fma).
__device__ __forceinline__ float bias_scale(float x, float b, float s) { return (x + b) * s; }

__device__ __forceinline__ float4 bias_scale(float4 x, float4 b, float s) {
    return make_float4(bias_scale(x.x, b.x, s), bias_scale(x.y, b.y, s), bias_scale(x.z, b.z, s),
                       bias_scale(x.w, b.w, s));
}

// x, y: rows x units contiguous column units (float4 when VEC, float otherwise); bias: units;
// scale: rows. Thread column c = blockIdx.x * blockDim.x + threadIdx.x; rows blockIdx.y * kRows + k,
// stepping by gridDim.y * kRows. No barrier in this kernel, so threads past the last column return.
template <bool VEC>
__global__ void __launch_bounds__(kMaxThreads)
bias_scale_rows(const float* __restrict__ x, const float* __restrict__ bias,
                const float* __restrict__ scale, float* __restrict__ y, long rows, long units) {
    using T = typename Unit<VEC>::T;
    const long c = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= units) return;
    const T* xu = reinterpret_cast<const T*>(x);
    T* yu = reinterpret_cast<T*>(y);
    const T b = __ldg(reinterpret_cast<const T*>(bias) + c);
    const long step = (long)gridDim.y * kRows;
    for (long r0 = (long)blockIdx.y * kRows; r0 < rows; r0 += step) {
        T v[kRows];
        float s[kRows];
#pragma unroll
        for (int k = 0; k < kRows; ++k) {
            const bool in = r0 + k < rows;
            v[k] = in ? __ldcs(xu + (r0 + k) * units + c) : T{};
            s[k] = in ? __ldg(scale + r0 + k) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kRows; ++k) {
            if (r0 + k < rows) __stcs(yu + (r0 + k) * units + c, bias_scale(v[k], b, s[k]));
        }
    }
}

long round_up32(long v) { return (v + 31) / 32 * 32; }

template <bool VEC>
void launch(const float* x, const float* bias, const float* scale, float* y, long rows, long units,
            cudaStream_t stream) {
    const int threads = (int)(units < kMaxThreads ? round_up32(units) : kMaxThreads);
    const long gx = (units + threads - 1) / threads;
    long gy = (rows + kRows - 1) / kRows;
    gy = gy < 65535 ? gy : 65535;
    const dim3 grid((unsigned)gx, (unsigned)gy);
    bias_scale_rows<VEC><<<grid, threads, 0, stream>>>(x, bias, scale, y, rows, units);
}

}  // namespace

// y[r, c] = (x[r, c] + bias[c]) * scale[r] for a contiguous rows x cols matrix.
extern "C" int bias_add_row_scale_forward(const float* x, const float* bias, const float* scale,
                                          float* y, long rows, long cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                           reinterpret_cast<uintptr_t>(bias);
    if ((addr & 15) == 0 && cols % 4 == 0) {
        launch<true>(x, bias, scale, y, rows, cols / 4, stream);
    } else {
        launch<false>(x, bias, scale, y, rows, cols, stream);
    }
    return (int)cudaGetLastError();
}
"""

lib = runtime.load(CUDA_SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias, scale):
        x = x.contiguous()
        bias = bias.contiguous()
        scale = scale.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1]
        rows = x.numel() // cols
        if bias.numel() != cols or scale.numel() != rows:
            raise ValueError(f"expected bias of {cols} and scale of {rows} values (x {tuple(x.shape)}), "
                             f"got {tuple(bias.shape)} and {tuple(scale.shape)}")
        lib.bias_add_row_scale_forward(x, bias, scale, y, rows, cols)
        return y
