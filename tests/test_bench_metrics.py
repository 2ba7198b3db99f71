"""Bench metrics against hand-computed examples (no GPU, no torch)."""

from __future__ import annotations

import math

import pytest

from kernelwright.report.metrics import Bootstrap, Outcome, bench_metrics, bootstrap_geomean, fast_p, geomean, group_metrics

# A: 2x eager, 4x compile          B: 1.02x eager (under the 5 % margin), 0.5x compile
# C: wrong                         D: no solution
# E: 1.1x eager, no compile time   F (level 2): 3x both
A = Outcome("a", 1, "correct", runtime_ms=1.0, eager_ms=2.0, compile_ms=4.0)
B = Outcome("b", 1, "correct", runtime_ms=1.0, eager_ms=1.02, compile_ms=0.5)
C = Outcome("c", 1, "incorrect", runtime_ms=None, eager_ms=3.0, compile_ms=3.0)
D = Outcome("d", 1, "missing")
E = Outcome("e", 1, "correct", runtime_ms=2.0, eager_ms=2.2, compile_ms=None)
F = Outcome("f", 2, "correct", runtime_ms=1.0, eager_ms=3.0, compile_ms=3.0)
BOOT = Bootstrap(resamples=2000, seed=0)


def level1() -> dict:
    return group_metrics([A, B, C, D, E], BOOT, "level1")


def test_counts_and_pass_rate_count_every_problem():
    m = level1()
    assert (m["n_problems"], m["n_judged"], m["n_missing"], m["n_correct"]) == (5, 4, 1, 3)
    assert m["status_counts"] == {"correct": 3, "incorrect": 1, "missing": 1}
    assert m["pass_rate"] == pytest.approx(3 / 5)
    assert m["n_missing_baseline"] == {"eager": 0, "compile": 1}


def test_faster_than_rates_at_1x_and_at_the_5_percent_margin():
    f = level1()["faster_than"]
    assert f["eager"] == {"over_1x": pytest.approx(3 / 5), "over_5pct": pytest.approx(2 / 5)}  # B is within 5 %
    assert f["compile"] == {"over_1x": pytest.approx(1 / 5), "over_5pct": pytest.approx(1 / 5)}  # E has no compile time
    assert f["both"] == {"over_1x": pytest.approx(1 / 5), "over_5pct": pytest.approx(1 / 5)}


def test_fast_p_per_threshold():
    fp = level1()["fast_p"]
    assert fp["eager"] == {"0": 0.6, "0.5": 0.6, "0.8": 0.6, "1": 0.6, "1.2": 0.2, "1.5": 0.2, "2": 0.0}  # 2.0 is not > 2
    # best = the faster baseline timed: A 2x, B 0.5x (not > 0.5), E 1.1x (eager only: no compile time)
    assert fp["best"] == {"0": 0.6, "0.5": 0.4, "0.8": 0.4, "1": 0.4, "1.2": 0.2, "1.5": 0.2, "2": 0.0}
    untimed = Outcome("u", 1, "correct", runtime_ms=1.0)  # correct, no baseline at all: counts at p = 0 only
    assert fast_p([untimed], "best", 0) == 1.0 and fast_p([untimed], "best", 0.5) == 0.0
    assert fp["compile"]["1.5"] == pytest.approx(0.2) and fp["compile"]["0.5"] == pytest.approx(0.2)


def test_geomeans_over_correct_and_over_all_with_failures_as_1x():
    g = level1()["geomean_speedup"]
    assert g["eager"]["correct"]["value"] == pytest.approx((2 * 1.02 * 1.1) ** (1 / 3))
    assert g["eager"]["correct"]["n"] == 3
    assert g["eager"]["all"]["value"] == pytest.approx((2 * 1.02 * 1.1) ** (1 / 5))
    assert g["eager"]["all"]["n"] == 5
    assert g["best"]["correct"]["value"] == pytest.approx(1.1 ** (1 / 3)) and g["best"]["correct"]["n"] == 3  # 2x, 0.5x, 1.1x
    assert g["compile"]["all"]["value"] == pytest.approx((4 * 0.5) ** (1 / 5))


def test_levels_and_overall():
    m = bench_metrics([A, B, C, D, E, F], BOOT)
    assert set(m["levels"]) == {"1", "2"}
    assert m["levels"]["2"]["pass_rate"] == 1.0 and m["levels"]["2"]["faster_than"]["both"]["over_5pct"] == 1.0
    assert m["overall"]["n_problems"] == 6 and m["overall"]["pass_rate"] == pytest.approx(4 / 6)
    assert m["levels"]["1"]["pass_rate"] == level1()["pass_rate"]


def test_empty_group_has_no_rates_and_no_intervals():
    m = group_metrics([], BOOT)
    assert m["pass_rate"] is None and m["fast_p"]["eager"]["1"] is None
    assert m["geomean_speedup"]["best"]["correct"] == {"value": None, "ci95": None, "n": 0}


def test_bootstrap_interval_is_reproducible_and_brackets_the_estimate():
    values = [0.8, 1.1, 1.3, 2.0, 2.5, 0.9, 1.7]
    a = bootstrap_geomean(values, BOOT, "k")
    assert a == bootstrap_geomean(values, BOOT, "k")  # same seed and key, same interval
    assert a != bootstrap_geomean(values, BOOT, "another series")
    assert a[0] < geomean(values) < a[1]
    assert min(values) <= a[0] and a[1] <= max(values)
    assert bootstrap_geomean([1.5] * 6, BOOT, "k") == pytest.approx([1.5, 1.5])
    assert bootstrap_geomean([1.0, 2.0, 3.0, 4.0], BOOT, "k") is None  # under MIN_CI_N values: no interval
    assert bootstrap_geomean([], BOOT, "k") is None


def test_bootstrap_coverage_on_a_known_distribution():
    """About 95 % of intervals from log-normal samples hold the true geometric mean (e^0 = 1)."""
    import numpy as np

    rng = np.random.default_rng(7)
    boot = Bootstrap(resamples=1000, seed=1)
    hits = sum(lo <= 1.0 <= hi for lo, hi in (bootstrap_geomean(list(np.exp(rng.normal(0, 0.5, 40))), boot, f"t{i}") for i in range(200)))
    assert 0.88 <= hits / 200 <= 0.99


def test_bad_bootstrap_settings_say_the_value():
    with pytest.raises(ValueError, match="got 0"):
        Bootstrap(resamples=0)
    with pytest.raises(ValueError, match="got 1.5"):
        Bootstrap(confidence=1.5)
    with pytest.raises(ValueError, match="got -1"):
        Bootstrap(seed=-1)


def test_a_baseline_never_timed_gives_no_rates_not_zero():
    no_compile = [Outcome("a", 1, "correct", runtime_ms=1.0, eager_ms=2.0), Outcome("b", 1, "incorrect")]
    m = group_metrics(no_compile, BOOT)
    assert m["faster_than"]["compile"] == {"over_1x": None, "over_5pct": None} and m["faster_than"]["both"]["over_1x"] is None
    assert m["fast_p"]["compile"]["0"] is None and m["geomean_speedup"]["compile"]["all"]["value"] is None
    assert m["faster_than"]["eager"]["over_1x"] == 0.5 and m["fast_p"]["best"]["1"] == 0.5  # best: the faster of those timed


def test_sanitizer_errors_make_a_correct_verdict_a_failure():
    dirty = Outcome("a", 1, "correct", runtime_ms=1.0, eager_ms=2.0, compile_ms=2.0, sanitizer_errors=3)
    clean = Outcome("b", 1, "correct", runtime_ms=1.0, eager_ms=2.0, compile_ms=2.0, sanitizer_errors=0)
    m = group_metrics([dirty, clean], BOOT)
    assert m["n_correct"] == 1 and m["n_sanitizer_errors"] == 1 and m["faster_than"]["both"]["over_5pct"] == 0.5


def test_non_finite_or_zero_times_are_not_speedups():
    o = Outcome("z", 1, "correct", runtime_ms=0.0, eager_ms=1.0, compile_ms=math.nan)
    assert o.speedup("eager") is None and o.baseline_ms("compile") is None and not o.faster("eager")
