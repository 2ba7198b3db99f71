"""Physics floor and efficiency ceilings for the reference GPU (H200), from shared/GPU.md, and the
vendor peaks of the other GPUs a verdict may run on.

The floor uses the vendor's peaks, so no honest kernel can fall under it; efficiency uses the
ceilings measured on the GPU machine, so it reads as a fraction of what is reachable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VENDOR_BYTES_PER_S = 4.8e12  # H200 datasheet memory bandwidth
VENDOR_FLOPS_PER_S = 990e12  # H200 datasheet dense bf16 tensor rate (the highest non-fp8 rate)

# Datasheet peaks by a fragment of the name torch gives the device, found as whole words (so "B200"
# is not GB200's, nor "A100" an RTX A1000's; the first found wins, a longer name before its prefix):
# memory bandwidth in bytes/s, dense bf16 tensor rate (no sparsity) in FLOP/s. From NVIDIA's
# product pages and datasheets for each part.
GPU_PEAKS = (
    ("GH200", 4.9e12, 989e12),  # the 144 GB HBM3e part (the 96 GB HBM3 one has 4.0 TB/s: the higher figure)
    ("H200 NVL", 4.8e12, 835e12),
    ("H200", VENDOR_BYTES_PER_S, VENDOR_FLOPS_PER_S),
    ("H100 PCIe", 2.0e12, 756e12),
    ("H100 NVL", 3.9e12, 835e12),
    ("H100", 3.35e12, 989e12),  # SXM, "NVIDIA H100 80GB HBM3"
    ("B200", 8.0e12, 2250e12),
    ("A100 80GB PCIe", 1.935e12, 312e12),
    ("A100-SXM4-80GB", 2.039e12, 312e12),  # and "A100-SXM4-40GB", "A100-PCIE-40GB" below
    ("A100", 1.555e12, 312e12),  # the 40 GB parts
)


_PARTS = tuple((re.compile(r"(?:^|[\s-])" + re.escape(part.upper()) + r"(?:$|[\s-])").search, part, bw, rate) for part, bw, rate in GPU_PEAKS)


@dataclass(frozen=True)
class Peaks:
    """The vendor peaks a verdict's floor uses on one GPU."""

    gpu: str  # the part they are for ("H100"), or "H200" standing in for a GPU the table lacks
    bytes_per_s: float
    flops_per_s: float
    known: bool  # False: the device's name is not in GPU_PEAKS (its own peaks are unknown)


def peaks_for(gpu_name: str | None) -> Peaks:
    """The datasheet peaks of the GPU torch names `gpu_name`; the H200's, marked not known, for a
    GPU the table lacks (or no name)."""
    name = (gpu_name or "").upper()
    for found, part, bw, rate in _PARTS:
        if found(name):
            return Peaks(part, bw, rate, True)
    return Peaks("H200", VENDOR_BYTES_PER_S, VENDOR_FLOPS_PER_S, False)

MEASURED_BYTES_PER_S = 4.3e12  # device-to-device copy, bytes read + written (GPU.md)
MEASURED_FLOPS_PER_S = {
    "fp32": 51e12,  # fp32 4096^2 matmul in 2.68 ms (GPU.md)
    "tf32": 395e12,  # estimate: datasheet dense tf32 (495) scaled by the measured bf16 ratio (790/990)
    "bf16": 790e12,  # 8192^3 bf16 matmul (GPU.md)
    "fp16": 790e12,  # taken equal to bf16 (same tensor-core rate on the datasheet)
}


def floor_ms(n_bytes: int, flops: int, peaks: Peaks | None = None) -> float:
    """The physics floor: max(bytes / peak bandwidth, FLOPs / peak rate), in milliseconds, at
    `peaks` (default the H200's)."""
    if n_bytes < 0 or flops < 0:
        raise ValueError(f"bytes and flops must be non-negative, got {n_bytes}, {flops}")
    bw, rate = (peaks.bytes_per_s, peaks.flops_per_s) if peaks else (VENDOR_BYTES_PER_S, VENDOR_FLOPS_PER_S)
    return max(n_bytes / bw, flops / rate) * 1e3


def ceiling_ms(n_bytes: int, flops: int, precision: str) -> float:
    """The best time reachable at the measured ceilings for the policy's precision, in ms."""
    rate = MEASURED_FLOPS_PER_S.get(precision, MEASURED_FLOPS_PER_S["fp32"])
    return max(n_bytes / MEASURED_BYTES_PER_S, flops / rate) * 1e3


def efficiency(n_bytes: int, flops: int, precision: str, runtime_ms: float) -> float | None:
    """Measured-ceiling time over the runtime (1.0 = at the ceiling)."""
    if not runtime_ms or runtime_ms <= 0:
        return None
    return ceiling_ms(n_bytes, flops, precision) / runtime_ms
