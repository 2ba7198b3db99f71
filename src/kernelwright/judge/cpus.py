"""CPUs kept for the timing children on a GPU host.

Step device_sync charges a call whose device-wide end event comes later than the empty call's by
more than a margin (judge.measure): the host's side of a synchronize is in that figure. On the H200
the candidate child's median tail moved between about 15 and 100 us from one verdict to the next,
flat within a verdict and not following what the other verdicts of the service did at the time
(benchmarks/results/warm_h200.md, "At 2475e8d"; the analysis in its 2026-12-04 section): a
property of where the process ran, which the exclusive device lock does not control. So on a host
with enough CPUs the judge keeps PER_DEVICE of them for the children that time on each GPU:

- every child the judge starts, the fork server it forks them from and the compilers of a build
  leave those CPUs (keep_off);
- for the timed rounds (judge.measure.run_timing) and the reference child's timed setup (the
  empty and held calls that cap step device_sync's base), the children that time are moved onto
  them (pinned) and off them again afterwards. Nothing else of the judge's runs there, and both
  children of a verdict time on the same CPUs.

This is placement, not a guard: a candidate that moves itself elsewhere changes only its own
figures, and the rules of the timing protocol are the same with it off. The CPUs are the last
PER_DEVICE x (GPU index + 1) of those this process may use, preferring the GPU's own NUMA node
when the host names it (one GPU visible, or CUDA_DEVICE_ORDER=PCI_BUS_ID); nothing is kept with
fewer than MIN_CPUS or on a host without an NVIDIA GPU. `KERNELWRIGHT_TIMING_CPUS` overrides the choice: `off`, or a list such as
`14,15` or `12-15` (the same CPUs for every GPU). With several GPUs, the children of one GPU keep
off that GPU's CPUs only. CPU verdicts are never pinned (their kernels run on the host's threads).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

log = logging.getLogger(__name__)

ENV = "KERNELWRIGHT_TIMING_CPUS"
MIN_CPUS = 8  # fewer and nothing is kept: the rest of the judge needs the room more
PER_DEVICE = 2  # the timing child's main thread and its CUDA driver's threads

_initial: list[int] | None = None


def allowed() -> list[int]:
    """The CPUs this process could use when the judge first asked (later moves of its own do not count)."""
    global _initial
    if _initial is None:
        try:
            _initial = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            _initial = []
    return _initial


def parse(text: str) -> list[int]:
    """'14,15' or '12-15' (or both mixed) as a sorted list; ValueError naming the variable otherwise."""
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise ValueError(f"{ENV} must be 'off' or a list of CPUs such as '14,15' or '12-15', got {text!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"{ENV}: {part!r} is not a range of CPU numbers")
        out.update(range(first, last + 1))
    return sorted(out)


def _gpus() -> list[str]:
    """The PCI addresses of the NVIDIA GPUs the kernel driver lists, sorted (empty without one)."""
    try:
        return sorted(p.name for p in Path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        return []


def _gpu_local(gpu_index: int) -> set[int]:
    """The CPUs of the GPU's NUMA node as the kernel lists them for its PCI device; empty when the
    GPU cannot be told apart from others (several GPUs and CUDA's default order)."""
    buses = _gpus()
    if not buses or len(buses) != 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return set()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    index = gpu_index
    if visible:
        if not 0 <= gpu_index < len(visible) or not visible[gpu_index].isdigit():
            return set()
        index = int(visible[gpu_index])
    if not 0 <= index < len(buses):
        return set()
    try:
        text = (Path("/sys/bus/pci/devices") / buses[index].lower() / "local_cpulist").read_text().strip()
        return set(parse(text))
    except (OSError, ValueError):
        return set()


def timing_cpus(gpu_index: int | None) -> list[int]:
    """The CPUs kept for the timing children of GPU gpu_index; empty when none are kept."""
    raw = os.environ.get(ENV, "").strip()
    if raw.lower() in ("off", "none"):
        return []
    mine = allowed()
    if raw and raw.lower() != "auto":
        return parse(raw)
    if not _gpus():
        return []
    k = max(0, gpu_index or 0)
    if len(mine) < MIN_CPUS or len(mine) - PER_DEVICE * (k + 1) < MIN_CPUS - PER_DEVICE:
        return []
    local = [c for c in mine if c in _gpu_local(k)]
    pool = local if len(local) >= MIN_CPUS - PER_DEVICE else mine
    end = len(pool) - PER_DEVICE * k
    return pool[end - PER_DEVICE:end]


def _set(pid: int, cpus: Iterable[int]) -> bool:
    """Every thread of process pid onto cpus; False when it is gone or cannot be moved."""
    mask = set(cpus)
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    moved = False
    for tid in tids:
        try:
            os.sched_setaffinity(tid, mask)
            moved = True
        except (OSError, AttributeError):
            continue
    return moved


def everywhere(pid: int | None) -> None:
    """Process pid back onto every CPU this process could use (a CPU verdict's child, forked from a
    fork server that keeps off the timing CPUs)."""
    if pid and timing_cpus(0) and allowed():
        _set(pid, allowed())


def keep_off(pid: int | None, gpu_index: int | None = 0) -> None:
    """Move process pid off the CPUs kept for gpu_index's timing (onto every other CPU this process could use)."""
    kept = timing_cpus(gpu_index)
    if not pid or not kept:
        return
    rest = [c for c in allowed() if c not in kept]
    if rest:
        _set(pid, rest)


@contextlib.contextmanager
def pinned(children: Iterable[Any]) -> Iterator[list[int]]:
    """The given judge children (judge.workers.Child) on their GPU's timing CPUs for the block, and
    off them after it: yields the CPUs (empty when none are kept or the children are not on a GPU)."""
    kids = [c for c in children if c is not None and getattr(c.config, "device", "") == "cuda"]
    kept = timing_cpus(kids[0].config.gpu_index) if kids else []
    moved = [c for c in kids if kept and _set(c.pid, kept)]
    if kids and kept and not moved:
        log.debug("could not move the timing children onto CPUs %s", kept)
    try:
        yield kept if moved else []
    finally:
        for c in moved:
            keep_off(c.pid, c.config.gpu_index)
