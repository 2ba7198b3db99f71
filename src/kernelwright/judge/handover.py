"""Candidate outputs handed to the reference child by descriptor, never through named files.

The candidate child's judge code stages what a call returned and describes it; the judge passes
the description (and, on the CPU backend, a descriptor) to the reference child, which compares
the bytes (taken):

- **CUDA**: the outputs are copied into one device allocation of the candidate child's (cuMemAlloc,
  reused while large enough) and exported as a CUDA IPC handle (64 bytes in the reply). The
  reference child opens the handle, checks the allocation is as large as the description claims
  (cuMemGetAddressRange), compares the bytes where they are and closes the handle. The candidate
  child's process group is stopped (SIGSTOP) and sent nothing until that comparison is done
  (judge.phases, judge.workers.Child.paused), and the stager synchronised the device after its
  copy, so no code or GPU work of the candidate's runs between the hand-over and the comparison.
  Comparing in place, not in a copy, saves an output's size on the GPU (judge.memory) and widens
  one gap: GPU work that a native thread of the candidate's launched between the stager's last
  synchronise and the stop keeps running (a stop halts threads, not the device), and it has the
  whole comparison to land in rather than one copy.
- **CPU**: the outputs are written into a memfd that is then sealed against writes, growing and
  shrinking (F_SEAL_WRITE, F_SEAL_GROW, F_SEAL_SHRINK): after the seal nobody, the candidate's
  process included, can change its bytes. The descriptor travels over the children's result
  sockets (SCM_RIGHTS, judge.channel); the reference child refuses one without those seals.

A description is the candidate's claim and is checked before anything is allocated for it: the
number of outputs, each one's shape and dtype against the reference's (judge.correctness), the
bytes against the shape and every offset against the one layout the stager uses (outputs one
after another, ALIGN apart), so that a lying description costs the reference child no memory
beyond a bounded multiple of the reference's own output size and maps nothing past its outputs.
Nothing here needs a named file, so it works unchanged once children are sandboxed.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import torch


ALIGN = 256  # byte alignment of each output inside a staging area
HANDLE_BYTES = 64  # sizeof(CUipcMemHandle)
DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2,
)}
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK
MAX_ITEMS = 64  # outputs a description may list


class HandoverError(RuntimeError):
    """A description or staging area that cannot be taken (the candidate's output is unreadable)."""


@dataclass(frozen=True)
class Item:
    """One output as described: a tensor's shape, dtype, bytes and place, or a non-tensor's type."""

    type_name: str  # "torch.Tensor", "mymod.MyTensor", "builtins.int"
    is_tensor: bool
    shape: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    offset: int = 0
    nbytes: int = 0

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _type_name(value: Any) -> str:
    t = type(value)
    return "torch.Tensor" if t is torch.Tensor else f"{t.__module__}.{t.__qualname__}"


_T = torch._C.TensorBase  # methods called through the C base class, never looked up on the object (below)


def _plain(t: torch.Tensor) -> torch.Tensor:
    """A tensor's data as a plain contiguous tensor, whatever its subclass says. Every method is
    the C base class's, called with the tensor: `t.detach()` would find a function the candidate
    set on that one output object (`out.detach = ...`, no class or watched name changed), which
    could compute the answer here, at the hand-over, outside every timed region, for a forward
    that did nothing (zoo_lazy_output)."""
    with torch._C.DisableTorchFunction():
        base = _T.detach(t)
        if type(base) is not torch.Tensor:
            base = _T.as_subclass(base, torch.Tensor)
        return _T.contiguous(base)


def _values(out: Any) -> list[Any]:
    """The forward's outputs as a list: a tuple or list (a named tuple, torch.return_types too, as
    the reference side flattens them) read through the base type's own iterator (a subclass's
    __iter__ would be candidate code run at the hand-over); anything else is one value."""
    if issubclass(type(out), tuple):
        return list(tuple.__iter__(out))
    if issubclass(type(out), list):
        return list(list.__iter__(out))
    return [out]


def _is_tensor(v: Any) -> bool:
    """A tensor by its type, not by isinstance (an object's __class__ property can claim any class)."""
    return issubclass(type(v), torch.Tensor)


def _layout(out: Any) -> tuple[list[dict[str, Any]], list[torch.Tensor | None], int]:
    values = _values(out)
    if len(values) > MAX_ITEMS:
        raise HandoverError(f"{len(values)} outputs; at most {MAX_ITEMS} are taken")
    items, sources, total = [], [], 0
    for v in values:
        if not _is_tensor(v) or str(v.dtype).replace("torch.", "") not in DTYPES:
            name = _type_name(v) if not _is_tensor(v) else f"{_type_name(v)} of dtype {v.dtype}, which the judge does not compare"
            items.append({"type": name, "tensor": False})
            sources.append(None)
            continue
        src = _plain(v)
        nbytes = _T.numel(src) * _T.element_size(src)
        items.append({"type": _type_name(v), "tensor": True, "shape": list(src.shape), "dtype": str(src.dtype).replace("torch.", ""),
                      "offset": total, "nbytes": nbytes})
        sources.append(src)
        total += _aligned(nbytes)
    return items, sources, total


def _aligned(nbytes: int) -> int:
    """Room an output of nbytes takes in a staging area: outputs start ALIGN bytes apart."""
    return -(-nbytes // ALIGN) * ALIGN


def _bytes_of(src: torch.Tensor) -> torch.Tensor:
    return _T.view(_T.reshape(src, (-1,)), torch.uint8)


# --- the CUDA driver, for IPC ---------------------------------------------------------------------


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


_driver: Any = None


def _cuda() -> Any:
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        u64, size_t = ctypes.c_uint64, ctypes.c_size_t
        for name, args in (("cuMemAlloc_v2", [ctypes.POINTER(u64), size_t]), ("cuMemFree_v2", [u64]),
                           ("cuIpcGetMemHandle", [ctypes.POINTER(_Handle), u64]),
                           ("cuIpcOpenMemHandle_v2", [ctypes.POINTER(u64), _Handle, ctypes.c_uint]),
                           ("cuIpcCloseMemHandle", [u64]),
                           ("cuMemGetAddressRange_v2", [ctypes.POINTER(u64), ctypes.POINTER(size_t), u64])):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        _driver = lib
    return _driver


def _check(code: int, what: str) -> None:
    if code != 0:
        raise HandoverError(f"{what} failed with CUDA driver error {code}")


class _DevicePointer:
    """A raw device range as torch sees one (__cuda_array_interface__), bytes only."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3, "strides": None}


def _device_bytes(ptr: int, nbytes: int) -> torch.Tensor:
    return torch.as_tensor(_DevicePointer(ptr, nbytes), device="cuda")


# --- the candidate child's side -------------------------------------------------------------------


class Stager:
    """Stages one call's outputs at a time (the candidate child holds one)."""

    def __init__(self) -> None:
        self._ptr = 0  # the reusable device allocation
        self._size = 0

    def stage(self, out: Any, device: torch.device) -> tuple[dict[str, Any], list[int]]:
        """Copy out into a staging area; (its description, descriptors to send with it)."""
        items, sources, total = _layout(out)
        desc: dict[str, Any] = {"items": items, "total": total}
        if total == 0:
            return {**desc, "kind": "none"}, []
        if device.type == "cuda":
            return self._stage_cuda(desc, sources, total), []
        fd = _stage_memfd(sources, items, total)
        return {**desc, "kind": "memfd"}, [fd]

    def _stage_cuda(self, desc: dict[str, Any], sources: list[torch.Tensor | None], total: int) -> dict[str, Any]:
        drv = _cuda()
        torch.cuda.synchronize()
        if self._size < total:
            self.release()
            ptr = ctypes.c_uint64()
            _check(drv.cuMemAlloc_v2(ctypes.byref(ptr), total), "cuMemAlloc")
            self._ptr, self._size = ptr.value, total
        area = _device_bytes(self._ptr, total)
        for item, src in zip(desc["items"], sources):
            if src is not None and item["nbytes"]:
                area[item["offset"]:item["offset"] + item["nbytes"]].copy_(_bytes_of(_T.to(src, "cuda")))
        del area
        torch.cuda.synchronize()
        handle = _Handle()
        _check(drv.cuIpcGetMemHandle(ctypes.byref(handle), self._ptr), "cuIpcGetMemHandle")
        return {**desc, "kind": "cuda_ipc", "handle": ctypes.string_at(ctypes.addressof(handle), HANDLE_BYTES).hex(), "pid": os.getpid()}

    def release(self) -> None:
        """Free the device staging area (the next stage allocates again)."""
        if self._ptr:
            torch.cuda.synchronize()
            _cuda().cuMemFree_v2(self._ptr)
            self._ptr, self._size = 0, 0


def _stage_memfd(sources: list[torch.Tensor | None], items: list[dict[str, Any]], total: int) -> int:
    fd = os.memfd_create("kw-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, total)
        with mmap.mmap(fd, total, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE) as m:
            for item, src in zip(items, sources):
                if src is not None and item["nbytes"]:
                    dst = torch.frombuffer(m, dtype=torch.uint8, count=item["nbytes"], offset=item["offset"])
                    dst.copy_(_bytes_of(_T.cpu(src)))
                    del dst
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


# --- the reference child's side -------------------------------------------------------------------


def items_of(desc: Any) -> list[Item]:
    """The description's outputs, checked for form (types, bounds, sizes against shapes)."""
    if not isinstance(desc, dict) or not isinstance(desc.get("items"), list) or not isinstance(desc.get("total"), int):
        raise HandoverError("malformed output description")
    total, raw = desc["total"], desc["items"]
    if len(raw) > MAX_ITEMS or total < 0:
        raise HandoverError("malformed output description")
    items, at = [], 0  # `at`: where the next tensor must start, as the candidate child's _layout places them
    for it in raw:
        if not isinstance(it, dict) or not isinstance(it.get("type"), str):
            raise HandoverError("malformed output description")
        if not it.get("tensor"):
            items.append(Item(it["type"][:200], False))
            continue
        shape, dtype, offset, nbytes = it.get("shape"), DTYPES.get(str(it.get("dtype"))), it.get("offset"), it.get("nbytes")
        if (not isinstance(shape, list) or len(shape) > 32 or not all(type(d) is int and d >= 0 for d in shape) or dtype is None
                or type(offset) is not int or type(nbytes) is not int or offset < 0 or offset % ALIGN):
            raise HandoverError("malformed output description")
        item = Item(it["type"][:200], True, tuple(shape), dtype, offset, nbytes)
        if nbytes != item.numel() * torch.empty((), dtype=dtype).element_size() or offset != at:
            raise HandoverError("the output description's sizes do not add up")
        items.append(item)
        at += _aligned(nbytes)
    if total != at:
        raise HandoverError(f"the output description's total ({total} bytes) is not its outputs' ({at})")
    return items


@contextlib.contextmanager
def taken(desc: dict[str, Any], items: list[Item], fds: list[int], device: torch.device) -> Iterator[list[Any]]:
    """The described outputs for the block; non-tensors as their Item. On CUDA they are views of the
    candidate's staging area, mapped and read in place (no copy: the reference child holds no
    second output, judge.memory), valid inside the block only, while the candidate child is paused
    (judge.phases); on the CPU they are copies out of the sealed memfd. Call only after items_of
    and the shape checks (they bound what is mapped or allocated)."""
    kind = desc.get("kind")
    tensors = [i for i in items if i.is_tensor and i.nbytes]
    if not tensors:
        yield _assemble(items, {}, device)
    elif kind == "cuda_ipc" and device.type == "cuda":
        with _mapped_cuda(desc, tensors) as flat:
            try:
                yield _assemble(items, flat, device)
            finally:
                torch.cuda.synchronize()  # every read of the mapping done before it is closed
    elif kind == "memfd" and len(fds) == 1:
        yield _assemble(items, _take_memfd(fds[0], desc["total"], tensors), device)
    else:
        raise HandoverError(f"an output staged as {kind!r} cannot be taken on {device.type}")


def _assemble(items: list[Item], flat: dict[int, torch.Tensor], device: torch.device) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not item.is_tensor:
            out.append(item)
            continue
        data = flat.get(item.offset) if item.nbytes else torch.empty(0, dtype=torch.uint8)
        out.append(data.to(device).view(item.dtype).reshape(item.shape))
    return out


@contextlib.contextmanager
def _mapped_cuda(desc: dict[str, Any], tensors: list[Item]) -> Iterator[dict[int, torch.Tensor]]:
    handle_hex = desc.get("handle")
    if not isinstance(handle_hex, str) or len(handle_hex) != 2 * HANDLE_BYTES:
        raise HandoverError("malformed CUDA IPC handle")
    drv = _cuda()
    handle = _Handle()
    try:
        raw = bytes.fromhex(handle_hex)
    except ValueError:
        raise HandoverError("malformed CUDA IPC handle") from None
    ctypes.memmove(ctypes.addressof(handle), raw, HANDLE_BYTES)
    ptr = ctypes.c_uint64()
    torch.cuda.init()
    torch.cuda.synchronize()  # the primary context current on this thread
    _check(drv.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, 1), "opening the output's CUDA IPC handle")
    try:
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        _check(drv.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr.value), "cuMemGetAddressRange")
        room = base.value + size.value - ptr.value
        if desc["total"] > room:
            raise HandoverError(f"the output's staging area holds {room} bytes, not the {desc['total']} described")
        yield {item.offset: _device_bytes(ptr.value + item.offset, item.nbytes) for item in tensors}
    finally:
        drv.cuIpcCloseMemHandle(ptr.value)


def _take_memfd(fd: int, total: int, tensors: list[Item]) -> dict[int, torch.Tensor]:
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise HandoverError("the output's descriptor is not a sealable memfd") from None
    if seals & SEALS != SEALS:
        raise HandoverError("the output's memfd is not sealed against writes")
    if os.fstat(fd).st_size < total:
        raise HandoverError(f"the output's memfd holds {os.fstat(fd).st_size} bytes, not the {total} described")
    out = {}
    with mmap.mmap(fd, total, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) as m, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the mapping is read-only; it is only read
        for item in tensors:
            view = torch.frombuffer(m, dtype=torch.uint8, count=item.nbytes, offset=item.offset)
            out[item.offset] = view.clone()
            del view
    return out
