"""Kernel provenance: where the GPU time of one profiled forward went (torch-free).

The candidate child profiles one call and sends back every device activity it saw (name, time,
stream). Here each is put in one origin:

- `candidate`: a kernel whose name holds a `__global__` function of the candidate's own sources;
- `allocation`: memsets, memcpys and ATen's fill, arange and copy kernels (what `torch.zeros`,
  `.contiguous()` or `.to()` run: the op audit's allow-list, seen from the GPU; a copy that
  converts dtype runs the same kernel, which only the op audit tells apart);
- `aten`: any other kernel of PyTorch's own (`at::native::...`, and the cuBLAS / cuDNN calls it makes
  are their libraries' below);
- `cublas`, `cudnn`, `cutlass`, `triton`: kernels of those libraries, by their naming;
- `unattributed`: anything else (a kernel from a cubin loaded by hand, a name the source scan
  missed). It counts as the candidate's own work: it is not a library the policy names.

The guard refuses GPU time in `aten` unless the policy allows torch compute, and in a library the
policy's `libraries` does not name. The op audit asks the same question on the host side; this is
the device's answer, and it also sees kernels launched where no dispatch mode looks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

LIBRARIES = ("cublas", "cudnn", "cutlass", "triton")  # what Policy.libraries may name

_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+|__noinline__\s+)*void\s+"
                     r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)")

# order matters: the first match names the origin
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("allocation", re.compile(r"^(Memset|Memcpy)|FillFunctor|fill_kernel|copy_kernel|arange")),
    # CUTLASS templates compiled into the candidate's own code demangle as cutlass::...; the
    # libraries' precompiled CUTLASS kernels are named cutlass_80_..., cutlass3x_... (below)
    ("cutlass", re.compile(r"cutlass::")),
    ("cudnn", re.compile(r"cudnn|implicit_convolve|fprop|dgrad|wgrad|fft2d|winograd", re.I)),
    ("cublas", re.compile(r"cublas|cutlass_|cutlass3x|gemm|gemv|nvjet|xmma|trsm|syrk|dot_kernel|scal_kernel|axpy", re.I)),
    ("triton", re.compile(r"^triton_|triton", re.I)),
    ("aten", re.compile(r"at::native|at::cuda|c10::|\bat::|cunn_|elementwise_kernel|reduce_kernel")),
)


def kernel_names(texts: Iterable[str]) -> set[str]:
    """The `__global__` function names defined in the candidate's C/C++/CUDA source texts (raw
    sources and the strings given to load_inline alike)."""
    names: set[str] = set()
    for text in texts:
        names.update(_GLOBAL.findall(text))
    return names


def origin(name: str, own: set[str]) -> str:
    """The origin of one device activity (see the module docstring)."""
    if own and any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(k)}(?![A-Za-z0-9_])", name) for k in own):
        return "candidate"
    for label, pattern in _PATTERNS:
        if pattern.search(name):
            return label
    return "unattributed"


@dataclass(frozen=True)
class Provenance:
    """GPU time by origin for one profiled forward."""

    ms: dict[str, float]  # origin -> milliseconds
    kernels: dict[str, list[str]]  # origin -> up to 5 kernel names, longest first
    streams: int  # distinct streams the activities ran on

    @property
    def total_ms(self) -> float:
        return sum(self.ms.values())

    def share(self, origin_name: str) -> float:
        total = self.total_ms
        return self.ms.get(origin_name, 0.0) / total if total > 0 else 0.0

    def disallowed(self, *, allow_torch: bool, libraries: Iterable[str]) -> list[str]:
        """Origins with GPU time that the policy does not allow."""
        allowed = {"candidate", "allocation", "unattributed", *libraries} | ({"aten"} if allow_torch else set())
        return [o for o, t in self.ms.items() if t > 0 and o not in allowed]

    def describe(self) -> str:
        total = self.total_ms
        if total <= 0:
            return "no device activity in the profiled call"
        parts = []
        for o, t in sorted(self.ms.items(), key=lambda kv: -kv[1]):
            names = ", ".join(n[:80] for n in self.kernels.get(o, [])[:3])
            parts.append(f"{o} {100 * t / total:.1f} % ({t:.4g} ms{': ' + names if names else ''})")
        return f"{total:.4g} ms of device time on {self.streams} stream(s): " + "; ".join(parts)


def classify(events: Iterable[Any], own: set[str]) -> Provenance:
    """events: [name, milliseconds, stream] per device activity, as the candidate child sends them."""
    ms: dict[str, float] = {}
    by_time: dict[str, dict[str, float]] = {}
    streams = set()
    for name, t, stream in events:
        o = origin(str(name), own)
        ms[o] = ms.get(o, 0.0) + float(t)
        by_time.setdefault(o, {})
        by_time[o][str(name)] = by_time[o].get(str(name), 0.0) + float(t)
        streams.add(stream)
    kernels = {o: [n for n, _ in sorted(d.items(), key=lambda kv: -kv[1])[:5]] for o, d in by_time.items()}
    return Provenance(ms, kernels, len(streams))
