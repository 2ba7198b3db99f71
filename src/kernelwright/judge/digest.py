"""The input check's keyed digest in one kernel of the judge's own (CPU and CUDA).

Step inputs_unchanged digests every input before and after each call (judge.inputs). The torch
operators' digest (judge.input_digest.torch_digest) takes three kernels per chunk and 32 MiB of int64
weights, about 11 ms a 512 MiB input on the H200, about a third of a correctness-only softmax verdict
(benchmarks/results/warm_h200.md). Here one pass reads each word once, makes its weight from the
key on the spot and keeps no temporaries beyond one partial sum per block.

The digest. The input's bytes are read as unsigned 16-bit words u_j (bytes for one-byte dtypes),
numbered from 0 across the whole tensor (a strided tensor's slabs continue the count), and

    D = sum_j w_j * u_j  (mod p),   p = 2**61 - 1 (a prime),
    w_j = 1 + (31 bits of h(key, j // 2)),  so w_j is in [1, 2**31],

where h is SplitMix64's output function of key + (j // 2) * 0x9E3779B97F4A7C15; word 2m takes
the low 32 bits of h(key, m), word 2m + 1 the high 32, each shifted right by one. A change
d_j = u'_j - u_j (|d_j| < 2**16, not all zero, so some d_k is not 0 mod p) goes unseen only when
sum_j w_j d_j = 0 (mod p): fix every other weight (the partner word's half of the same hash
included), and of the 2**31 values w_k can take, distinct mod p, at most one does that. The
chance is at most 1 in 2**31 per changed input and case if the key's hashes look uniform (they
are not cryptographic: the key is a secret 62-bit draw made after the inputs, and nothing of the
digest leaves the process). The same bound as the torch digest's, which stays as the fallback
when this kernel cannot be built (judge.input_digest.torch_digest).

Exact arithmetic: a product is below 2**47; a running sum is folded (2**61 = 1 mod p) after every
two products, so nothing wraps; per-thread and per-block sums are folded as they are added, and
the last sum is taken mod p in Python.

Built with the raw runtime (g++ or nvcc, cached like any kernel) in the candidate child before any
candidate code runs, as the lead spin is (judge.lead). Like the rest of the input check, it runs
in the candidate's process: a tripwire, not a wall (docs/judge.md).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

P = (1 << 61) - 1
_T = torch._C.TensorBase  # tensor methods through the C base class, never looked up on the object
THREADS = 256  # per block (the CUDA kernel's shared array has this many slots)

_COMMON = r"""
#include <stdint.h>
#define KW_P 0x1FFFFFFFFFFFFFFFULL
#define KW_GOLD 0x9E3779B97F4A7C15ULL

KW_FN uint64_t kw_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
KW_FN uint64_t kw_fold(uint64_t a) { return (a & KW_P) + (a >> 61); }  /* = a (mod p), below 2^61 + 8 */
KW_FN uint64_t kw_lo(uint64_t h) { return 1 + ((h & 0xFFFFFFFFULL) >> 1); }  /* word 2m's weight */
KW_FN uint64_t kw_hi(uint64_t h) { return 1 + ((h >> 32) >> 1); }  /* word 2m + 1's weight */
"""

CPU_SOURCE = "#define KW_FN static inline\n" + _COMMON + r"""
template <typename W>
static uint64_t kw_run(const W* x, long long n, uint64_t key, long long first) {
    const long long s = first & 1;  /* an odd first word is the high half of its pair */
    uint64_t total = 0;
    if (s && n > 0) total = kw_fold(kw_hi(kw_mix(key + (uint64_t)(first >> 1) * KW_GOLD)) * (uint64_t)x[0]);
    const long long pairs = n > s ? (n - s) / 2 : 0, base = (first + s) >> 1;
    const long long B = 2048;  /* pairs a task sums before a fold: below 2^59 */
    #pragma omp parallel
    {
        uint64_t mine = 0;
        #pragma omp for schedule(static)
        for (long long b = 0; b < (pairs + B - 1) / B; ++b) {
            const long long hi = (b + 1) * B < pairs ? (b + 1) * B : pairs;
            uint64_t acc = 0;
            for (long long m = b * B; m < hi; ++m) {
                const uint64_t h = kw_mix(key + (uint64_t)(base + m) * KW_GOLD);
                const W* p = x + s + 2 * m;
                acc += kw_lo(h) * (uint64_t)p[0] + kw_hi(h) * (uint64_t)p[1];
            }
            mine = kw_fold(mine + kw_fold(acc));
        }
        #pragma omp critical
        total = kw_fold(total + mine);
    }
    if (n > s && ((n - s) & 1))  /* a last word without its partner: the low half of its pair */
        total = kw_fold(total + kw_lo(kw_mix(key + (uint64_t)((first + n - 1) >> 1) * KW_GOLD)) * (uint64_t)x[n - 1]);
    return total;
}

extern "C" int kw_digest_cpu(const void* data, long long n, int wide, unsigned long long key, long long first, unsigned long long* out) {
    if (n < 0 || first < 0 || (n > 0 && data == 0) || out == 0) return 1;
    *out = wide ? kw_run((const uint16_t*)data, n, key, first) : kw_run((const uint8_t*)data, n, key, first);
    return 0;
}
"""

CUDA_SOURCE = "#include <cuda_runtime.h>\n#define KW_FN static __device__ __forceinline__\n" + _COMMON + r"""
template <typename W>
__global__ void kw_digest_kernel(const W* __restrict__ x, long long n, uint64_t key, long long first, uint64_t* partial) {
    __shared__ uint64_t s[256];
    const long long p0 = first >> 1, p1 = (first + n - 1) >> 1;  /* the pairs of words this slab touches */
    uint64_t acc = 0;
    for (long long m = p0 + (long long)blockIdx.x * blockDim.x + threadIdx.x; m <= p1; m += (long long)gridDim.x * blockDim.x) {
        uint64_t h = kw_mix(key + (uint64_t)m * KW_GOLD);
        long long j = 2 * m - first;  /* -1 only for the slab's first word when `first` is odd */
        uint64_t a = j >= 0 ? kw_lo(h) * (uint64_t)x[j] : 0;
        uint64_t b = j + 1 < n ? kw_hi(h) * (uint64_t)x[j + 1] : 0;
        acc = kw_fold(acc + a + b);
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] = kw_fold(s[threadIdx.x] + s[threadIdx.x + k]);
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

extern "C" int kw_digest_cuda(const void* data, long long n, int wide, unsigned long long key, long long first, void* partial,
                              int blocks, cudaStream_t stream) {
    if (n <= 0 || first < 0 || blocks <= 0 || data == 0 || partial == 0) return 1;
    cudaGetLastError();  /* an error an earlier launch left (the candidate's) is not this launch's */
    if (wide)
        kw_digest_kernel<uint16_t><<<blocks, 256, 0, stream>>>((const uint16_t*)data, n, key, first, (uint64_t*)partial);
    else
        kw_digest_kernel<uint8_t><<<blocks, 256, 0, stream>>>((const uint8_t*)data, n, key, first, (uint64_t*)partial);
    return (int)cudaGetLastError();
}
"""

# The loaded entry points, set by load() before the candidate is imported and watched by name from
# then on (judge.watch.WATCHED): a candidate that swaps one is refused.
cpu_fn: Any = None
cuda_fn: Any = None
_WHY: dict[str, str] = {}
_BLOCKS: dict[int, int] = {}


def load(device_type: str) -> str:
    """Build (or take from the cache) and load the digest for a device type; "native" when it
    loaded, else why not (the input check then uses judge.inputs' torch digest)."""
    global cpu_fn, cuda_fn
    if (device_type == "cuda" and cuda_fn is not None) or (device_type != "cuda" and cpu_fn is not None):
        return "native"
    if device_type in _WHY:
        return _WHY[device_type]
    if os.environ.get("KERNELWRIGHT_DIGEST", "") == "torch":  # the fallback on purpose (benchmarks compare the two)
        _WHY[device_type] = "torch operators (KERNELWRIGHT_DIGEST=torch)"
        return _WHY[device_type]
    try:
        from kernelwright import runtime

        if device_type == "cuda":
            lib = runtime.load(CUDA_SOURCE, lang="cuda", name="kw_digest")
            fn = ctypes.CDLL(str(lib.path)).kw_digest_cuda
            fn.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_longlong, ctypes.c_void_p,
                           ctypes.c_int, ctypes.c_void_p]
            fn.restype = ctypes.c_int
            cuda_fn = fn
        else:
            lib = runtime.load(CPU_SOURCE, lang="cpp", name="kw_digest")
            fn = ctypes.CDLL(str(lib.path)).kw_digest_cpu
            fn.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_longlong, ctypes.c_void_p]
            fn.restype = ctypes.c_int
            cpu_fn = fn
    except Exception as exc:  # noqa: BLE001 - the torch digest is the reported fallback
        _WHY[device_type] = f"torch operators (the judge's digest kernel did not load: {type(exc).__name__}: {str(exc)[:200]})"
        return _WHY[device_type]
    return "native"


def available(t: torch.Tensor) -> bool:
    """Whether the loaded kernel can digest this tensor's device (a meta tensor, say, has no
    bytes: the torch digest refuses it with an exception instead)."""
    kind = t.device.type
    return kind in ("cpu", "cuda") and (cuda_fn if kind == "cuda" else cpu_fn) is not None


def words(t: torch.Tensor) -> tuple[int, bool]:
    """How many words a contiguous tensor's bytes make, and whether they are 16-bit (else bytes)."""
    nbytes = _T.numel(t) * _T.element_size(t)
    wide = _T.element_size(t) != 1  # a wider dtype's byte count is even
    return (nbytes // 2 if wide else nbytes), wide


def digest_slab(t: torch.Tensor, key: int, first: int) -> int:
    """The digest (mod p) of a contiguous tensor's words numbered from `first` (a strided tensor's
    later slabs continue its count)."""
    n, wide = words(t)
    if n == 0:
        return 0
    key &= (1 << 64) - 1
    if t.is_cuda:
        device = t.device.index if t.device.index is not None else torch.cuda.current_device()
        if device not in _BLOCKS:
            _BLOCKS[device] = torch.cuda.get_device_properties(device).multi_processor_count * 8
        blocks = max(1, min(_BLOCKS[device], -(-((n + 1) // 2 + 1) // THREADS)))
        partial = torch.empty(blocks, dtype=torch.int64, device=t.device)
        with torch.cuda.device(device):  # launched where the tensor lives, on that device's current stream
            code = cuda_fn(_T.data_ptr(t), n, int(wide), key, first, _T.data_ptr(partial), blocks,
                           torch.cuda.current_stream(device).cuda_stream)
        if code != 0:
            raise RuntimeError(f"the input check's digest kernel failed to launch (CUDA error {code})")
        return sum(partial.cpu().tolist()) % P  # each below 2**62: never negative as int64
    out = torch.zeros(1, dtype=torch.int64)  # the kernel's answer, below 2**62, read back like the CUDA partials (no ctypes helper)
    code = cpu_fn(_T.data_ptr(t), n, int(wide), key, first, _T.data_ptr(out))
    if code != 0:
        raise RuntimeError(f"the input check's digest kernel refused its arguments (code {code})")
    return out.tolist()[0] % P


def reference(data: bytes, wide: bool, key: int, first: int = 0) -> int:
    """The same digest in Python integers, word by word (for the tests)."""
    key &= (1 << 64) - 1
    mask = (1 << 64) - 1
    total = 0
    step = 2 if wide else 1
    for j in range(len(data) // step):
        g = first + j
        z = (key + (g >> 1) * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        h = z ^ (z >> 31)
        w = 1 + (((h >> 32) if g & 1 else (h & 0xFFFFFFFF)) >> 1)
        u = int.from_bytes(data[step * j:step * j + step], "little")
        total += w * u
    return total % P
