"""Physics floor and efficiency ceilings for the reference GPU (H200), from shared/GPU.md.

The floor uses the vendor's peaks, so no honest kernel can fall under it; efficiency uses the
ceilings measured on the GPU machine, so it reads as a fraction of what is reachable.
"""

from __future__ import annotations

VENDOR_BYTES_PER_S = 4.8e12  # H200 datasheet memory bandwidth
VENDOR_FLOPS_PER_S = 990e12  # H200 datasheet dense bf16 tensor rate (the highest non-fp8 rate)

MEASURED_BYTES_PER_S = 4.3e12  # device-to-device copy, bytes read + written (GPU.md)
MEASURED_FLOPS_PER_S = {
    "fp32": 51e12,  # fp32 4096^2 matmul in 2.68 ms (GPU.md)
    "tf32": 395e12,  # estimate: datasheet dense tf32 (495) scaled by the measured bf16 ratio (790/990)
    "bf16": 790e12,  # 8192^3 bf16 matmul (GPU.md)
    "fp16": 790e12,  # taken equal to bf16 (same tensor-core rate on the datasheet)
}


def floor_ms(n_bytes: int, flops: int) -> float:
    """The physics floor: max(bytes / peak bandwidth, FLOPs / peak rate), in milliseconds."""
    if n_bytes < 0 or flops < 0:
        raise ValueError(f"bytes and flops must be non-negative, got {n_bytes}, {flops}")
    return max(n_bytes / VENDOR_BYTES_PER_S, flops / VENDOR_FLOPS_PER_S) * 1e3


def ceiling_ms(n_bytes: int, flops: int, precision: str) -> float:
    """The best time reachable at the measured ceilings for the policy's precision, in ms."""
    rate = MEASURED_FLOPS_PER_S.get(precision, MEASURED_FLOPS_PER_S["fp32"])
    return max(n_bytes / MEASURED_BYTES_PER_S, flops / rate) * 1e3


def efficiency(n_bytes: int, flops: int, precision: str, runtime_ms: float) -> float | None:
    """Measured-ceiling time over the runtime (1.0 = at the ceiling)."""
    if not runtime_ms or runtime_ms <= 0:
        return None
    return ceiling_ms(n_bytes, flops, precision) / runtime_ms
