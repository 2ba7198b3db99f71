"""Pure helpers of the GPU benchmark scripts (no GPU, no torch): the variants of tail_bench and
the timing make-up that warm_bench records for every verdict it compares."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"kw_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    return mod


tail = _load("tail_bench")
warm = _load("warm_bench")


@pytest.mark.parametrize(("text", "want"), [("plain", (None, False, False)), ("spin", ("spin", False, False)), ("pin", (None, True, False)),
                                            ("blocking+pin", ("blocking", True, False)), ("pin+yield", ("yield", True, False)),
                                            ("fork", (None, False, True)), ("spin+fork+pin", ("spin", True, True))])
def test_tail_variants_parse(text, want):
    assert tail.parse_variant(text) == want


@pytest.mark.parametrize("text", ["", "fast", "spin+yield", "plain+pin", "spin+pin+x", "pin+pin"])
def test_tail_variants_refuse_what_they_cannot_run(text):
    with pytest.raises(ValueError, match="variant"):
        tail.parse_variant(text)


def test_tail_summary_counts_slow_processes_against_the_quietest():
    runs = [{"variant": "plain", "rows": {"spin": {"100": {"tail_median_us": m}}}} for m in (13.0, 14.5, 28.1, 40.0)]
    runs += [{"variant": "spin", "rows": {"spin": {"100": {"tail_median_us": 12.0}}}}, {"variant": "spin", "error": "no GPU"}]
    got = tail.summarize(runs, [100])
    assert got["plain"]["100"] == {"tail_medians_us": [13.0, 14.5, 28.1, 40.0], "spread_us": 27.0, "slow": 2, "processes": 4}
    assert got["spin"]["100"]["processes"] == 1 and got["spin"]["100"]["slow"] == 0
    assert tail.slow_processes([]) == 0
    later = [{"variant": "plain", "rows": {"spin": {"100": {"tail_median_us": 13.0}}}, "rows_later": {"spin": {"100": {"tail_median_us": 31.0}}}}]
    assert tail.summarize(later, [100])["plain later"]["100"]["tail_medians_us"] == [31.0]


def test_warm_timing_diag_reads_the_charge_and_the_kernel_time():
    row = {"runtime_ms": 0.5417, "timing": {"raw_median_ms": 0.543, "overhead_ms": 0.0013, "profiler_ms": 0.5523, "n": 24, "iqr_ms": 0.011},
           "steps": [{"name": "l2_flush", "ran": True, "reason": ""},
                     {"name": "device_sync", "ran": True, "reason": "device-wide synchronize ...; calls charged: candidate 23 of 24 (margin 10 us)"}],
           "phases": [(0.05, "starting the children"), (0.61, "timing the candidate")], "workers": {"reference": "new"}, "span_s": (225.3, 232.7)}
    d = warm.timing_diag(row)
    assert d["charged"] == "calls charged: candidate 23 of 24 (margin 10 us)"
    assert (d["profiler_ms"], d["n"], d["reference"], d["timing_began_s"]) == (0.5523, 24, "new", 225.91)


def test_warm_timing_diag_of_a_correctness_only_verdict_is_empty_not_an_error():
    d = warm.timing_diag({"runtime_ms": None, "timing": None, "steps": [], "phases": [], "workers": None})
    assert d["charged"] is None and d["raw_median_ms"] is None and d["timing_began_s"] is None


def test_warm_timing_diag_through_a_service_takes_the_services_log():
    row = {"runtime_ms": 0.26, "timing": {}, "steps": [], "phases": [(1.146, "verdict serialized")], "span_s": (10.0, 11.2),
           "service": {"queued_s": 0.25, "progress_log": [(0.1, "starting the children"), (0.586, "timing the candidate")]}}
    assert warm.timing_diag(row)["timing_began_s"] == 10.836
