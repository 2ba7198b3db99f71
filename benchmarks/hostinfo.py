"""The host's CPU in a benchmark's provenance: its model and a fixed calibration workload.

Most of a warm verdict's wall is host work (forks, pipes, Python in the children), so two runs of
the same commit on two GPU machines of the same kind can differ by what their CPUs do. On the H200
at 1055d9e a service's first compile (nvcc, no judge code in it) took 1.66 s, at 6b606d6 2.18 s and
at 2475e8d 2.06 s, and every host phase of a warm verdict moved by about the same share
(benchmarks/results/warm_h200.md). The calibration here lets a reader tell a slower host from a
slower judge: the same Python loop and hash on every machine, best of five.
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path
from typing import Any

_HASHED = bytes(range(256)) * (1 << 16)  # 16 MiB


def cpu_model() -> str:
    """The first `model name` of /proc/cpuinfo, or what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def calibration_ms(repeats: int = 5) -> dict[str, float]:
    """Milliseconds of two fixed workloads, the best of `repeats` each: a Python loop of a million
    steps (the interpreter) and a SHA-256 of 16 MiB (one core's memory and integer work)."""
    loop = digest = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i & 7
        t1 = time.perf_counter()
        hashlib.sha256(_HASHED).digest()
        t2 = time.perf_counter()
        loop, digest = min(loop, (t1 - t0) * 1e3), min(digest, (t2 - t1) * 1e3)
    return {"python_loop_ms": round(loop, 2), "sha256_16mib_ms": round(digest, 2)}


def topology() -> dict[str, Any]:
    """The NUMA nodes' CPUs and each NVIDIA GPU's local CPUs, as the kernel lists them (sysfs)."""
    nodes, gpus = {}, {}
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        try:
            nodes[node.name] = (node / "cpulist").read_text().strip()
        except OSError:
            continue
    try:
        buses = sorted(p.name for p in Path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        buses = []
    for bus in buses:
        try:
            gpus[bus] = (Path("/sys/bus/pci/devices") / bus.lower() / "local_cpulist").read_text().strip()
        except OSError:
            gpus[bus] = None
    return {"numa_nodes": nodes, "gpu_local_cpus": gpus}


def cpu_seconds() -> dict[str, float]:
    """The host's CPU time by kind since boot (/proc/stat's first line, in seconds): two readings
    give the share of a stretch lost to the hypervisor (steal) or spent in interrupts."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:1 + len(names)]
        tick = os.sysconf("SC_CLK_TCK")
        return {n: int(v) / tick for n, v in zip(names, fields)}
    except (OSError, ValueError, IndexError):
        return {}


def shares(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each kind's share of the CPU time between two cpu_seconds() readings."""
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    total = sum(delta.values())
    return {k: round(v / total, 4) for k, v in delta.items()} if total > 0 else {}


def host() -> dict[str, Any]:
    """{"cpu_model", "calibration", "topology"} for a provenance record."""
    return {"cpu_model": cpu_model(), "calibration": calibration_ms(), "topology": topology()}


def commit(given: str = "unknown") -> str:
    """The commit a benchmark measures: the one given, else HEAD's short hash, else "unknown"."""
    if given != "unknown":
        return given
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    except OSError:
        return given
    return head.stdout.strip() or given
