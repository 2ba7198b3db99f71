"""CPUs kept for the timing children (judge.cpus): which ones, and moving real processes onto and
off them. Placement only; the GPU half (a timed verdict names the CPUs its rounds ran on) is in
tests/test_gpu_isolation.py."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from kernelwright.judge import cpus


def test_parse_reads_lists_and_ranges_and_names_the_variable_when_wrong():
    assert cpus.parse("14,15") == [14, 15]
    assert cpus.parse("12-15") == [12, 13, 14, 15]
    assert cpus.parse(" 3, 5-6 ,") == [3, 5, 6]
    for bad in ("x", "5-3", "1-b"):
        with pytest.raises(ValueError, match="KERNELWRIGHT_TIMING_CPUS|range"):
            cpus.parse(bad)


@pytest.fixture
def host(monkeypatch):
    """A made-up host: 16 CPUs, one GPU whose NUMA node the kernel does not name."""
    monkeypatch.delenv(cpus.ENV, raising=False)
    monkeypatch.setattr(cpus, "_initial", list(range(16)))
    monkeypatch.setattr(cpus, "_gpus", lambda: ["0000:19:00.0"])
    monkeypatch.setattr(cpus, "_gpu_local", lambda _k: set())
    return monkeypatch


def test_the_last_two_cpus_are_kept_per_gpu_while_enough_remain(host):
    assert cpus.timing_cpus(0) == [14, 15]
    assert cpus.timing_cpus(None) == [14, 15]
    assert cpus.timing_cpus(1) == [12, 13]
    assert cpus.timing_cpus(4) == [6, 7]  # 6 left for everything else: the least kept for it
    assert cpus.timing_cpus(5) == []


def test_the_gpus_own_numa_node_is_preferred(host):
    host.setattr(cpus, "_gpu_local", lambda _k: set(range(8)))
    assert cpus.timing_cpus(0) == [6, 7]
    host.setattr(cpus, "_gpu_local", lambda _k: {0, 1, 2})  # too few there to leave room: the whole host
    assert cpus.timing_cpus(0) == [14, 15]


def test_nothing_is_kept_on_a_small_host_without_a_gpu_or_when_turned_off(host):
    host.setattr(cpus, "_initial", list(range(4)))
    assert cpus.timing_cpus(0) == []
    host.setattr(cpus, "_initial", list(range(16)))
    host.setattr(cpus, "_gpus", lambda: [])
    assert cpus.timing_cpus(0) == []
    host.setattr(cpus, "_gpus", lambda: ["0000:19:00.0"])
    host.setenv(cpus.ENV, "off")
    assert cpus.timing_cpus(0) == []
    host.setenv(cpus.ENV, "3,9")  # named: used as given, GPU or not
    host.setattr(cpus, "_gpus", lambda: [])
    assert cpus.timing_cpus(0) == [3, 9]


@dataclass
class _Config:
    device: str
    gpu_index: int = 0


@dataclass
class _Kid:
    config: _Config
    pid: int


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs Linux and two CPUs")
def test_pinned_moves_real_processes_onto_the_kept_cpus_and_off_them_after(monkeypatch):
    mine = sorted(os.sched_getaffinity(0))
    kept = mine[-1]
    monkeypatch.setattr(cpus, "_initial", mine)
    monkeypatch.setenv(cpus.ENV, str(kept))
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        gpu, host_only = _Kid(_Config("cuda"), procs[0].pid), _Kid(_Config("cpu"), procs[1].pid)
        with cpus.pinned([gpu, None]) as on:
            assert on == [kept]
            assert os.sched_getaffinity(gpu.pid) == {kept}
        assert os.sched_getaffinity(gpu.pid) == set(mine) - {kept}  # off them afterwards, onto the rest
        with cpus.pinned([host_only]) as on:  # a CPU verdict's children are never pinned
            assert on == []
            assert os.sched_getaffinity(host_only.pid) == set(mine)
        cpus.keep_off(host_only.pid)
        assert os.sched_getaffinity(host_only.pid) == set(mine) - {kept}
        cpus.everywhere(host_only.pid)
        assert os.sched_getaffinity(host_only.pid) == set(mine)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        with cpus.pinned([_Kid(_Config("cuda"), gone.pid)]) as on:  # a process that has exited: nothing moved, no error
            assert on == []
        monkeypatch.setenv(cpus.ENV, "off")
        with cpus.pinned([gpu]) as on:
            assert on == []
    finally:
        for p in procs:
            p.kill()
            p.wait()
