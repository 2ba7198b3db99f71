// C = A @ B, fp32, cache-blocked. OpenMP over (row block, column block) pairs; within a block the
// i-k-j order streams a row of B against one scalar of A, so the innermost loop is a contiguous
// axpy the compiler vectorizes. Summation over k is in order within each k block, blocks in order:
// plain fp32 accumulation, a different order from torch's BLAS but the same precision.
#include <algorithm>

namespace {
constexpr long kBlockM = 64;
constexpr long kBlockN = 256;
constexpr long kBlockK = 128;
}  // namespace

// C (M x N) = A (M x K) @ B (K x N), all contiguous row-major fp32.
extern "C" int matmul_forward(const float* __restrict__ A, const float* __restrict__ B,
                              float* __restrict__ C, long M, long N, long K) {
#pragma omp parallel for collapse(2) schedule(static)
    for (long i0 = 0; i0 < M; i0 += kBlockM) {
        for (long j0 = 0; j0 < N; j0 += kBlockN) {
            const long i1 = std::min(i0 + kBlockM, M);
            const long j1 = std::min(j0 + kBlockN, N);
            for (long i = i0; i < i1; ++i) {
                for (long j = j0; j < j1; ++j) C[i * N + j] = 0.0f;
            }
            for (long k0 = 0; k0 < K; k0 += kBlockK) {
                const long k1 = std::min(k0 + kBlockK, K);
                for (long i = i0; i < i1; ++i) {
                    float* __restrict__ c = C + i * N;
                    for (long k = k0; k < k1; ++k) {
                        const float a = A[i * K + k];
                        const float* __restrict__ b = B + k * N;
                        for (long j = j0; j < j1; ++j) c[j] += a * b[j];
                    }
                }
            }
        }
    }
    return 0;
}
