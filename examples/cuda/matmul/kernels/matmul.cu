// C = A @ B, strict fp32: FFMA on the CUDA cores only (no TF32, no tensor cores).
//
// Classic register-blocked SGEMM. A 256-thread block computes a 128 x 128 tile of C; each thread
// owns 8 x 8 outputs (two 4 x 4 quadrants 64 apart, so its shared-memory reads are conflict-free
// float4s). K advances 8 at a time through double-buffered shared memory: the next A and B slabs
// are fetched into registers while the current ones are used, then stored to the other buffer,
// one barrier per step. A is stored transposed (k-major) so a thread's 8 A values are 2 float4s.
// Tiles are visited in groups of 8 tile-rows along a 1-D grid, so consecutive blocks share A and B
// panels in L2, and no grid dimension limits M or N. Edges are zero-filled on load and masked on
// store; float4 global accesses when K and N are multiples of 4 and the pointers are aligned,
// scalar accesses otherwise.
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

namespace {

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 8;
constexpr int kThreads = 256;
constexpr int kGroupM = 8;

struct Slab {
    float a[4];  // A[m0 + tid / 2][k0 + (tid % 2) * 4 + i]
    float b[4];  // B[k0 + tid / 32][n0 + (tid % 32) * 4 + i]
};

template <bool VEC>
__device__ __forceinline__ Slab load_slab(const float* __restrict__ A, const float* __restrict__ B,
                                          int M, int N, int K, int m0, int n0, int k0) {
    const int tid = threadIdx.x;
    Slab s;
    const int gm = m0 + (tid >> 1);
    const int gk = k0 + ((tid & 1) << 2);
    const int gkb = k0 + (tid >> 5);
    const int gn = n0 + ((tid & 31) << 2);
    if (VEC) {  // K % 4 == 0 and N % 4 == 0: a float4 is wholly inside or wholly outside
        float4 ta = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float4 tb = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (gm < M && gk < K) ta = __ldg(reinterpret_cast<const float4*>(A + (long)gm * K + gk));
        if (gkb < K && gn < N) tb = __ldg(reinterpret_cast<const float4*>(B + (long)gkb * N + gn));
        s.a[0] = ta.x; s.a[1] = ta.y; s.a[2] = ta.z; s.a[3] = ta.w;
        s.b[0] = tb.x; s.b[1] = tb.y; s.b[2] = tb.z; s.b[3] = tb.w;
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            s.a[i] = (gm < M && gk + i < K) ? __ldg(A + (long)gm * K + gk + i) : 0.0f;
            s.b[i] = (gkb < K && gn + i < N) ? __ldg(B + (long)gkb * N + gn + i) : 0.0f;
        }
    }
    return s;
}

__device__ __forceinline__ void store_slab(const Slab& s, float (*As)[BM], float (*Bs)[BN]) {
    const int tid = threadIdx.x;
    const int a_row = tid >> 1;
    const int a_col = (tid & 1) << 2;
#pragma unroll
    for (int i = 0; i < 4; ++i) As[a_col + i][a_row] = s.a[i];  // transposed: k-major
    *reinterpret_cast<float4*>(&Bs[tid >> 5][(tid & 31) << 2]) =
        make_float4(s.b[0], s.b[1], s.b[2], s.b[3]);
}

template <bool VEC>
__global__ void __launch_bounds__(kThreads, 2)
sgemm_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K) {
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Bs[2][BK][BN];

    // Grouped tile order: kGroupM tile-rows at a time, column by column within the group.
    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int width = kGroupM * tiles_n;
    const int first_m = (pid / width) * kGroupM;
    const int group_m = min(tiles_m - first_m, kGroupM);
    const int m0 = (first_m + (pid % width) % group_m) * BM;
    const int n0 = ((pid % width) / group_m) * BN;

    const int tid = threadIdx.x;
    const int ty = tid >> 4;  // rows ty*4 .. +3 and 64 + ty*4 .. +3 of the tile
    const int tx = tid & 15;  // cols tx*4 .. +3 and 64 + tx*4 .. +3 of the tile

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    const int k_tiles = (K + BK - 1) / BK;
    Slab slab = load_slab<VEC>(A, B, M, N, K, m0, n0, 0);
    store_slab(slab, As[0], Bs[0]);
    __syncthreads();

    for (int kt = 0; kt < k_tiles; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < k_tiles;
        if (more) slab = load_slab<VEC>(A, B, M, N, K, m0, n0, (kt + 1) * BK);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        // The other buffer was last read in step kt - 1, before the barrier that ended it.
        if (more) store_slab(slab, As[cur ^ 1], Bs[cur ^ 1]);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int gm = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (gm >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int gn = n0 + h * 64 + tx * 4;
            float* c = C + (long)gm * N + gn;
            if (VEC) {
                if (gn < N) {
                    *reinterpret_cast<float4*>(c) = make_float4(
                        acc[i][h * 4 + 0], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (gn + j < N) c[j] = acc[i][h * 4 + j];
                }
            }
        }
    }
}

}  // namespace

// C (M x N) = A (M x K) @ B (K x N), all contiguous row-major fp32.
extern "C" int matmul_forward(const float* A, const float* B, float* C, long M, long N, long K,
                              cudaStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX) return (int)cudaErrorInvalidValue;
    if (K <= 0) return (int)cudaMemsetAsync(C, 0, sizeof(float) * M * N, stream);
    const long tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    if (tiles > INT_MAX) return (int)cudaErrorInvalidValue;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) |
                           reinterpret_cast<uintptr_t>(C);
    const int m = (int)M;
    const int n = (int)N;
    const int k = (int)K;
    if ((addr & 15) == 0 && k % 4 == 0 && n % 4 == 0) {
        sgemm_kernel<true><<<(unsigned)tiles, kThreads, 0, stream>>>(A, B, C, m, n, k);
    } else {
        sgemm_kernel<false><<<(unsigned)tiles, kThreads, 0, stream>>>(A, B, C, m, n, k);
    }
    return (int)cudaGetLastError();
}
