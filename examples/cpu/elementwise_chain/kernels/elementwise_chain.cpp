// y = gelu(x * scale + shift) * sigmoid(x), fp32, one fused pass, OpenMP over chunks.
// The math is torch's own: exact-erf GELU and 1 / (1 + exp(-x)).
#include <cmath>

extern "C" int elementwise_chain_forward(const float* x, float* y, long n, float scale,
                                         float shift) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) {
        const float v = x[i];
        const float z = v * scale + shift;
        const float gelu = z * 0.5f * (1.0f + std::erf(z * 0.70710678118654752f));
        const float sigmoid = 1.0f / (1.0f + std::exp(-v));
        y[i] = gelu * sigmoid;
    }
    return 0;
}
