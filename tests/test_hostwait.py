"""The pure parts of benchmarks/hostwait.py (the sync benchmark's wait-mode and pinning helper)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import hostwait  # noqa: E402


def test_cpulists_parse_ranges_and_singles():
    assert hostwait.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert hostwait.parse_cpulist("") == set()


def test_bus_ids_take_sysfs_form():
    assert hostwait.sysfs_name("00000000:1B:00.0") == "0000:1b:00.0"
    assert hostwait.sysfs_name("0000:3b:00.0") == "0000:3b:00.0"


def test_pinning_only_narrows_to_allowed_local_cores():
    assert hostwait.pin_choice({0, 1, 2}, {1, 2, 3, 4}) == {1, 2}
    assert hostwait.pin_choice({0, 1}, {0, 1}) == set()  # already all local: nothing to do
    assert hostwait.pin_choice({8, 9}, {0, 1}) == set()  # no allowed core on the node


def test_local_cores_come_from_sysfs(tmp_path):
    dev = tmp_path / "0000:1b:00.0"
    dev.mkdir()
    (dev / "local_cpulist").write_text("0-7\n")
    assert hostwait.local_cpus("0000:1b:00.0", sysfs=tmp_path) == set(range(8))
    assert hostwait.local_cpus("0000:ff:00.0", sysfs=tmp_path) == set()


def test_without_a_driver_prepare_says_so():
    import ctypes

    import pytest

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        assert "no CUDA driver" in hostwait.prepare(0)["error"]
    else:
        pytest.skip("a CUDA driver is present: prepare would set this process's wait flags")
