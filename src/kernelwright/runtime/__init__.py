"""What candidates import: compile raw extern "C" kernel sources, load them and call them.

    from kernelwright import runtime
    lib = runtime.load(SOURCE)            # str: source text; pathlib.Path: a file
    lib.launch(x, y, x.numel())           # tensors go as data_ptr(); a trailing stream may be omitted

Builds go through kernelwright.runtime.build (the same cache the judge prebuilds into). The prototypes
of the source's extern "C" functions set each function's ctypes argtypes and restype. This module
needs only torch (imported lazily, on the first call) and the standard library.
"""

from __future__ import annotations

import ctypes
import numbers
import operator
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelwright.runtime import build as _build
from kernelwright.runtime._prototypes import Kind, Param, Prototype, parse_prototypes

__all__ = ["BuildError", "KernelError", "Kernel", "Library", "Prototype", "load", "parse_prototypes", "signature"]

_LOADED: dict[str, "Library"] = {}  # build key -> loaded library, per process
_LOCK = threading.Lock()


class BuildError(RuntimeError):
    """The kernel source did not compile; .log holds the compiler's (truncated) output."""

    def __init__(self, log: str, *, name: str = "kernel", timed_out: bool = False) -> None:
        super().__init__(f"build of {name} failed{' (timed out)' if timed_out else ''}:\n{log}")
        self.log = log
        self.timed_out = timed_out


class KernelError(RuntimeError):
    """A kernel entry point returned a non-zero int / cudaError_t."""

    def __init__(self, function: str, code: int) -> None:
        super().__init__(f"{function} returned error code {code}")
        self.function = function
        self.code = code


class Kernel:
    """One callable extern "C" function of a loaded library."""

    def __init__(self, proto: Prototype, cfunc: Any) -> None:
        self.prototype = proto
        self._cfunc = cfunc
        cfunc.argtypes = [p.ctype for p in proto.params]
        cfunc.restype = proto.ret_ctype

    def __call__(self, *args: Any) -> Any:
        proto = self.prototype
        args = _with_stream(proto, args)
        values = [_convert(proto, p, a) for p, a in zip(proto.params, args)]
        result = self._cfunc(*values)
        if proto.checks_error and result != 0:
            raise KernelError(proto.name, int(result))
        return result

    def __repr__(self) -> str:
        return f"<kernel {self.prototype}>"


class Library:
    """A loaded shared library; attribute access gives its extern "C" functions as callables."""

    def __init__(self, result: _build.BuildResult, prototypes: dict[str, Prototype]) -> None:
        assert result.ok and result.lib_path is not None, result
        self.build = result
        self.path = result.lib_path
        self.prototypes = prototypes
        self._cdll = ctypes.CDLL(str(result.lib_path))
        self._kernels: dict[str, Kernel] = {}

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("__") or name not in self.__dict__.get("prototypes", {}):
            raise AttributeError(f"no extern \"C\" function {name!r} in {self!r}; found {self.names}")
        kernel = self._kernels.get(name)
        if kernel is None:
            kernel = self._kernels[name] = Kernel(_callable(self.prototypes[name]), getattr(self._cdll, name))
        return kernel

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.names))

    @property
    def names(self) -> list[str]:
        """Names of the host-callable extern "C" functions."""
        return sorted(n for n, p in self.prototypes.items() if p.host_callable)

    def __repr__(self) -> str:
        return f"<kernelwright.runtime.Library {self.path}>"


def load(
    source: str | os.PathLike[str],
    *,
    lang: str | None = None,
    name: str | None = None,
    flags: Sequence[str] = (),
    timeout_s: float = 300.0,
) -> Library:
    """Build (or fetch from the cache) and load a kernel source. A str is source text, a path a file."""
    spec = _spec(source, lang, name, flags)
    key = _build.key_for(spec)
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
    result = _build.build(spec, timeout_s=timeout_s)
    if not result.ok:
        raise BuildError(result.log, name=spec.name, timed_out=result.timed_out)
    lib = Library(result, parse_prototypes(spec.source))
    with _LOCK:
        return _LOADED.setdefault(result.key, lib)


def signature(lib: Library, name: str) -> Prototype:
    """The parsed prototype of one function of a library."""
    if name not in lib.prototypes:
        raise KeyError(f"no extern \"C\" function {name!r} in {lib!r}; found {lib.names}")
    return lib.prototypes[name]


def _spec(source: Any, lang: str | None, name: str | None, flags: Sequence[str]) -> _build.BuildSpec:
    """The build spec for load()'s arguments (shared with the judge's prebuild)."""
    if isinstance(flags, str):
        raise TypeError(f"flags must be a sequence of strings, got the string {flags!r}")
    if isinstance(source, str):
        return _build.spec_from_text(source, lang=lang, name=name, flags=flags)
    if isinstance(source, os.PathLike):
        return _build.spec_from_file(Path(source), lang=lang, name=name, flags=flags)
    raise TypeError(f"source must be source text (str) or a path (os.PathLike), got {type(source).__name__}")


def _callable(proto: Prototype) -> Prototype:
    """The prototype, checked to be callable from the host through ctypes."""
    if not proto.host_callable:
        raise TypeError(f"{proto.name} is a __global__ / __device__ function; call a host launcher instead")
    if proto.unsupported:
        raise TypeError(
            f"{proto.name}: cannot pass {', '.join(proto.unsupported)} through ctypes; "
            "use pointers, integers, float or double"
        )
    return proto


def _with_stream(proto: Prototype, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments, with the current stream appended when a trailing stream was omitted."""
    n = len(proto.params)
    if len(args) == n - 1 and proto.omittable_stream:
        return (*args, _current_stream())
    if len(args) != n:
        need = f"{n - 1} or {n}" if proto.omittable_stream else str(n)
        raise TypeError(f"{proto.name}() takes {need} arguments, got {len(args)}; signature: {proto}")
    return args


def _convert(proto: Prototype, param: Param, value: Any) -> Any:
    """One Python argument converted for ctypes, or TypeError naming the parameter."""
    if param.kind == Kind.POINTER:
        return _pointer(proto, param, value)
    if param.kind == Kind.STREAM:
        return _stream_handle(proto, param, value)
    if param.kind == Kind.INT:
        return _integer(proto, param, value)
    if isinstance(value, numbers.Real) and not _is_tensor(value):
        return float(value)
    raise TypeError(f"{proto.name}: parameter {param.name} ({param.type}) takes a float, got {type(value).__name__}")


def _pointer(proto: Prototype, param: Param, value: Any) -> int | None:
    """A tensor's data pointer, an int address, or None for NULL."""
    if _is_tensor(value):
        return value.data_ptr()
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError(
        f"{proto.name}: parameter {param.name} ({param.type}) takes a torch.Tensor or an int address, "
        f"got {type(value).__name__}"
    )


def _integer(proto: Prototype, param: Param, value: Any) -> int:
    """A Python int in range for the parameter's C type."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{proto.name}: parameter {param.name} ({param.type}) takes an int, got {type(value).__name__}"
        ) from None
    bits = 8 * ctypes.sizeof(param.ctype)
    signed = param.ctype(-1).value == -1
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not low <= number <= high and param.ctype is not ctypes.c_bool:
        raise OverflowError(
            f"{proto.name}: parameter {param.name} ({param.type}) got {number}, outside [{low}, {high}]"
        )
    return number


def _stream_handle(proto: Prototype, param: Param, value: Any) -> int | None:
    """A raw cudaStream_t from an int, None, or a torch stream object."""
    handle = getattr(value, "cuda_stream", value)
    if handle is None or (isinstance(handle, int) and not isinstance(handle, bool)):
        return handle
    raise TypeError(
        f"{proto.name}: parameter {param.name} ({param.type}) takes a stream (int handle or torch.cuda.Stream), "
        f"got {type(value).__name__}"
    )


def _torch() -> Any:
    """torch, imported on first use so that importing the runtime stays fast."""
    import torch

    return torch


def _is_tensor(value: Any) -> bool:
    """Whether a value is a torch.Tensor (a value cannot be one while torch is not imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _current_stream() -> int:
    """torch's current CUDA stream handle, or 0 without CUDA."""
    torch = _torch()
    if not torch.cuda.is_available():
        return 0
    return int(torch.cuda.current_stream().cuda_stream)
