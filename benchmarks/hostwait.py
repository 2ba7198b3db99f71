"""How a process's host thread waits for the GPU (CUDA only; torch-free, through the driver): the
wait modes and pinning benchmarks/sync_bench.py compared (neither helped on the H200, so the judge
uses neither).

The timing protocol's device-wide synchronize sits inside every timed interval: the GPU finishes,
the waiting host thread notices, returns and queues the end event. Two things set how long that
takes and how much it varies between processes: how the driver waits (spinning on the completion
flag, yielding the core, or sleeping until an interrupt) and where the thread runs (a core on the
GPU's own NUMA node reaches the GPU over a shorter path than one on the other socket).

`prepare` runs before torch creates the CUDA context, so the flags apply to the primary context
that torch then uses. Everything here degrades to a reported no-op: a machine without libcuda, a
container whose cores all sit on the other node, a driver that refuses the flags.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

SCHED_FLAGS = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}  # CU_CTX_SCHED_*


def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _device(cuda: ctypes.CDLL, ordinal: int) -> ctypes.c_int:
    dev = ctypes.c_int()
    for rc in (cuda.cuInit(0), cuda.cuDeviceGet(ctypes.byref(dev), ordinal)):
        if rc != 0:
            raise OSError(f"CUDA driver error {rc}")
    return dev


def pci_bus_id(ordinal: int = 0) -> str:
    """The PCI address of the CUDA device `ordinal` (after CUDA_VISIBLE_DEVICES), as sysfs names it."""
    cuda = _driver()
    dev = _device(cuda, ordinal)
    buf = ctypes.create_string_buffer(64)
    rc = cuda.cuDeviceGetPCIBusId(buf, 64, dev)
    if rc != 0:
        raise OSError(f"cuDeviceGetPCIBusId returned {rc}")
    return sysfs_name(buf.value.decode())


def sysfs_name(bus_id: str) -> str:
    """'00000000:1B:00.0' or '0000:1b:00.0' -> '0000:1b:00.0'."""
    domain, rest = bus_id.strip().lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def parse_cpulist(text: str) -> set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}; empty text -> empty set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def local_cpus(bus_id: str, sysfs: Path = Path("/sys/bus/pci/devices")) -> set[int]:
    """The cores on the device's NUMA node, as the kernel lists them; empty when it does not say."""
    try:
        return parse_cpulist((sysfs / bus_id / "local_cpulist").read_text())
    except OSError:
        return set()


def pin_choice(local: set[int], allowed: set[int]) -> set[int]:
    """The cores to run on: the GPU's local cores that this process may use; empty (stay as is)
    when there are none, or when they are all the process may use anyway."""
    both = local & allowed
    return both if both and both != allowed else set()


def prepare(ordinal: int = 0, *, pin: bool = True, sched: str = "spin") -> dict[str, str]:
    """Pin this thread to the GPU's local cores and set the primary context's wait flags, before
    any CUDA context exists. Returns what was done, one line per action, for the verdict's log."""
    done: dict[str, str] = {}
    try:
        cuda = _driver()
    except OSError as exc:
        return {"error": f"no CUDA driver: {exc}"}
    if pin:
        try:
            allowed = os.sched_getaffinity(0)
            local = local_cpus(pci_bus_id(ordinal))
            chosen = pin_choice(local, allowed)
            if chosen:
                os.sched_setaffinity(0, chosen)
                done["pin"] = f"{len(chosen)} of {len(allowed)} cores (the GPU's NUMA node)"
            else:
                done["pin"] = ("not pinned: the kernel names no local cores" if not local else
                               "not pinned: no allowed core on the GPU's node" if not local & allowed else
                               "not pinned: every allowed core is on the GPU's node")
        except (OSError, ValueError) as exc:
            done["pin"] = f"not pinned: {exc}"
    if sched != "auto":
        try:
            dev = _device(cuda, ordinal)
            set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
            rc = set_flags(dev, ctypes.c_uint(SCHED_FLAGS[sched]))
            done["sched"] = sched if rc == 0 else f"auto (cuDevicePrimaryCtxSetFlags returned {rc})"
        except (OSError, AttributeError, KeyError) as exc:
            done["sched"] = f"auto ({type(exc).__name__}: {exc})"
    return done
