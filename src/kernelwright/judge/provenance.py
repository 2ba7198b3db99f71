"""Kernel provenance: where the GPU time of one profiled forward went (torch-free).

The candidate child profiles one call and sends back every device activity it saw (name, time,
stream). Here each is put in one origin:

- `candidate`: a kernel whose unqualified function name is a `__global__` function of the
  candidate's own sources, or a `@triton.jit` function of its Python files (names under torch's and
  the libraries' own namespaces and prefixes are theirs first, so declaring a kernel of the same
  name claims nothing: `triton_*` is torch.compile's);
- `allocation`: memsets, memcpys and ATen's fill, arange and copy kernels (what `torch.zeros`,
  `.contiguous()` or `.to()` run: the op audit's allow-list, seen from the GPU; a copy that
  converts dtype runs the same kernel, which only the op audit tells apart);
- `aten`: any other kernel of PyTorch's own (`at::native::...`, and the cuBLAS / cuDNN calls it makes
  are their libraries' below);
- `cublas`, `cudnn`, `cutlass`, `triton`: kernels of those libraries, by their naming;
- `unattributed`: anything else (a kernel from a cubin loaded by hand, a name the source scan
  missed, a torch kernel outside the namespaces above). It counts as the candidate's own work: it
  is not a library the policy names. The step's reason lists its largest kernels.

Like the op audit, the profile is taken in the candidate's process: a candidate that tampers
with torch's profiler can forge it. function_identities watches the judge's side only.

The guard refuses GPU time in `aten` unless the policy allows torch compute, and in a library the
policy's `libraries` does not name. The op audit asks the same question on the host side; this is
the device's answer, and it also sees kernels launched where no dispatch mode looks.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Iterable

from kernelwright import pysource

LIBRARIES = ("cublas", "cudnn", "cutlass", "triton")  # what Policy.libraries may name

_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+|__noinline__\s+)*void\s+"
                     r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)")
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)

# Checked before the candidate's own names: namespaces and prefixes that only torch and the
# libraries use, so declaring a kernel of the same name cannot claim their time. Namespaces are
# matched on the kernel's qualified name only, so an own kernel that takes `c10::Half` or
# `cutlass::half_t` parameters stays the candidate's; the rest on the whole demangled name.
_MARKED_WHOLE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("allocation", re.compile(r"^(Memset|Memcpy)|FillFunctor|direct_copy_kernel|copy_kernel_cuda|arange_cuda_out")),
    ("aten", re.compile(r"\bcunn_|softmax_warp_(forward|backward)")),
    ("cudnn", re.compile(r"cudnn", re.I)),
    ("cublas", re.compile(r"cublas|^cutlass_|^cutlass3x|^nvjet|xmma|^(maxwell|pascal|volta|turing|ampere|ada|hopper|sm\d+)_\w*gemm|gemmk1_|splitKreduce",
                          re.I)),
    ("cudnn", re.compile(r"convolve_sgemm|^fft2d_|^fft3d_", re.I)),
    ("triton", re.compile(r"^triton_")),
)
_MARKED_QUALIFIED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("aten", re.compile(r"^(at|c10|at_cuda_detail)::")),
    ("cutlass", re.compile(r"^cutlass::")),
)
# Checked after them: generic words a candidate's own kernel may well use (`sgemm_kernel`).
_GENERIC: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("allocation", re.compile(r"fill_kernel|arange")),
    ("cudnn", re.compile(r"implicit_convolve|fprop|dgrad|wgrad|fft2d|winograd", re.I)),
    ("cublas", re.compile(r"gemm|gemv|trsm|syrk|dot_kernel|scal_kernel|axpy", re.I)),
    ("triton", re.compile(r"triton", re.I)),
    ("aten", re.compile(r"elementwise_kernel|reduce_kernel")),
)


def kernel_names(texts: Iterable[str]) -> set[str]:
    """The `__global__` function names defined in the candidate's C/C++/CUDA source texts (raw
    sources and the strings given to load_inline alike), comments left out."""
    names: set[str] = set()
    for text in texts:
        names.update(_GLOBAL.findall(_C_COMMENT.sub(" ", text)))
    return names


_TRITON_DECORATORS = {"jit", "autotune", "heuristics"}


def _triton_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to the triton module, names bound to triton's jit/autotune/heuristics) by the
    file's top-level imports: an import inside a function or under `if` does not count."""
    modules: set[str] = set()
    decorators: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "triton":
                    modules.add(alias.asname or "triton")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "triton":
            decorators.update(alias.asname or alias.name for alias in node.names if alias.name in _TRITON_DECORATORS)
    return modules, decorators


def _is_triton(expr: ast.expr, modules: set[str], decorators: set[str]) -> bool:
    """`triton.jit`, `triton.autotune(...)`, `jit` imported from triton, under the file's own names."""
    return pysource.names(expr.func if isinstance(expr, ast.Call) else expr, modules, decorators, _TRITON_DECORATORS)


def triton_kernel_names(texts: Iterable[str | bytes], *, reserved: bool = False) -> set[str]:
    """The Triton kernels defined in the candidate's Python texts: top-level functions decorated
    with triton's `jit` (alone or under its `autotune` / `heuristics`), and `f` in
    `k = triton.jit(f)` for a top-level function `f` of the same file, where the file imports triton
    at its top level. A compiled Triton kernel runs under its Python function's name. Names
    starting with `triton_` are torch.compile's (Inductor's prefix) and stay the `triton`
    library's whoever declares them, as do the libraries' own name shapes (`_MARKED_WHOLE`);
    `reserved=True` gives those `triton_` names instead (to tell a candidate to rename them)."""
    names: set[str] = set()
    for text in texts:
        try:
            tree = pysource.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError, SystemError):
            continue
        modules, decorators = _triton_aliases(tree)
        if not modules and not decorators:
            continue
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(_is_triton(d, modules, decorators) for d in node.decorator_list):
                names.add(node.name)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _is_triton(node.value.func, modules, decorators) \
                    and node.value.args and isinstance(node.value.args[0], ast.Name) and node.value.args[0].id in defined:
                names.add(node.value.args[0].id)
    return {n for n in names if n.startswith("triton_") == reserved}


def qualified_name(name: str) -> str:
    """The qualified function name of a demangled kernel name, without return type, template
    arguments or parameters: `void at::native::(anonymous namespace)::k<4>(float*)` ->
    `at::native::(anon)::k`."""
    text = name.replace("(anonymous namespace)", "(anon)")
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):  # the parameter list starts at the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and not text.startswith("(anon)", i):
            cut = i
            break
    out, depth = [], 0
    for ch in text[:cut]:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    words = "".join(out).split()
    return words[-1] if words else ""


def function_name(name: str) -> str:
    """The unqualified function name of a demangled kernel name: `void ns::k<4>(float*)` -> `k`."""
    return qualified_name(name).split("::")[-1]


def origin(name: str, own: set[str]) -> str:
    """The origin of one device activity (see the module docstring)."""
    for label, pattern in _MARKED_WHOLE:
        if pattern.search(name):
            return label
    qualified = qualified_name(name)
    for label, pattern in _MARKED_QUALIFIED:
        if pattern.search(qualified):
            return label
    if qualified.split("::")[-1] in own:
        return "candidate"
    for label, pattern in _GENERIC:
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
        """Origins with GPU time that the policy does not allow. Torch compute allowed allows the
        libraries torch itself calls too (a torch matmul runs cuBLAS's kernels)."""
        allowed = {"candidate", "allocation", "unattributed", *libraries} | ({"aten", *LIBRARIES} if allow_torch else set())
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
