// LayerNorm over the last dimension, fp32, OpenMP over rows. Two-pass statistics per row (mean,
// then mean of squared deviations), accumulated in double: no cancellation for a large mean.
#include <cmath>

// y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * weight + bias, contiguous rows x cols.
extern "C" int layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                                 long rows, long cols, float eps) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        double s = 0.0;
        for (long c = 0; c < cols; ++c) s += xr[c];
        const double mean = s / (double)cols;
        double d2 = 0.0;
        for (long c = 0; c < cols; ++c) {
            const double d = (double)xr[c] - mean;
            d2 += d * d;
        }
        const float rstd = (float)(1.0 / std::sqrt(d2 / (double)cols + (double)eps));
        const float fmean = (float)mean;
        for (long c = 0; c < cols; ++c) yr[c] = (xr[c] - fmean) * rstd * weight[c] + bias[c];
    }
    return 0;
}
