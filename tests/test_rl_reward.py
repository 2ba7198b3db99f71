"""The reward table (kernelwright.rl.reward) on verdict fixtures: each milestone, the 5 % edges,
refusals and infra_error, the log-speedup alternative and the shaping's limits."""

from __future__ import annotations

import math

import pytest

from kernelwright.rl.reward import RewardConfig, Shaping, milestone, score


def v(status="correct", t=1.0, eager=2.0, comp=2.0):
    return {"status": status, "runtime_ms": t, "eager_ms": eager, "compile_ms": comp}


@pytest.mark.parametrize("verdict, expected", [
    (v(t=1.0, eager=2.0, comp=2.0), 3),
    (v(t=1.0, eager=2.0, comp=1.0), 2),  # faster than eager only
    (v(t=1.0, eager=1.0, comp=0.5), 1),  # correct, not faster
    (v(t=0.95, eager=1.0, comp=5.0), 1),  # exactly 5 % faster is not "more than 5 %"
    (v(t=0.9499, eager=1.0, comp=5.0), 3),
    (v(t=0.9499, eager=1.0, comp=1.0), 3),
    (v(t=0.95, eager=2.0, comp=1.0), 2),  # the edge against torch.compile
    (v(t=0.9499, eager=2.0, comp=1.0), 3),
    (v(t=1.0, eager=2.0, comp=None), 2),  # no torch.compile time: 3 is out of reach
    (v(t=None), 1),  # correct without a time
    (v(status="incorrect"), -1),
    (v(status="rejected", t=0.001), -1),  # a refused exploit, however fast it claimed to be
    (v(status="compile_error", t=None), -1),
    (v(status="runtime_error"), -1),
    (v(status="timeout"), -1),
    (None, -1),  # no candidate
])
def test_the_milestones(verdict, expected):
    r = milestone(verdict)
    assert r.milestone == expected and r.value == float(expected) and not r.excluded, r
    assert r.reason


def test_infra_error_is_excluded_never_minus_one():
    for kind in ("milestone", "log_speedup"):
        r = score({"status": "infra_error", "runtime_ms": None}, RewardConfig(kind=kind), shaping=0.2)
        assert r.excluded and r.value is None and r.milestone is None, r
        assert "infra_error" in r.reason


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0.0, True, "1.0"])
def test_times_that_are_not_positive_numbers_do_not_earn_a_speed_milestone(bad):
    assert milestone(v(t=bad, eager=2.0, comp=2.0)).milestone == 1
    assert milestone(v(t=1.0, eager=bad, comp=2.0)).milestone == 1


def test_log_speedup_is_against_the_faster_baseline_and_clipped():
    cfg = RewardConfig(kind="log_speedup", clip=(-1.0, 1.0))
    r = score(v(t=1.0, eager=2.0, comp=1.5), cfg)
    assert r.value == pytest.approx(math.log(1.5)) and r.milestone == 3
    assert score(v(t=1.0, eager=100.0, comp=100.0), cfg).value == 1.0
    assert score(v(t=100.0, eager=1.0, comp=1.0), cfg).value == -1.0
    assert score(v(status="incorrect"), cfg).value == -1.0
    assert score(None, cfg).value == -1.0


def test_shaping_pays_each_candidate_once_per_tool_and_is_capped():
    s = Shaping(RewardConfig(verify_bonus=0.2, profile_bonus=0.3, shaping_cap=0.6))
    ok = {"status": "correct"}
    assert s.turn("verify", ok, "a") == 0.2
    assert s.turn("verify", ok, "a") == 0.0  # the same candidate again: nothing
    assert s.turn("verify", {"status": "incorrect"}, "b") == 0.0
    assert s.turn("compile", ok, "c") == 0.0
    assert s.turn("profile", ok, "a") == 0.3
    assert s.turn("verify", ok, "d") == pytest.approx(0.1)  # the cap leaves 0.1
    assert s.turn("verify", ok, "e") == 0.0 and s.total == pytest.approx(0.6)
    r = score(v(t=1.0, eager=1.0, comp=1.0), RewardConfig(), shaping=s.total)
    assert r.value == pytest.approx(1.6) and r.milestone == 1 and r.shaping == pytest.approx(0.6)


def test_shaping_is_off_by_default():
    s = Shaping(RewardConfig())
    assert s.turn("verify", {"status": "correct"}, "a") == 0.0 and s.total == 0.0


@pytest.mark.parametrize("settings, match", [
    ({"kind": "speedup"}, "kind"),
    ({"clip": (1.0, 1.0)}, "clip"),
    ({"verify_bonus": -0.1}, "verify_bonus"),
    ({"shaping_cap": float("nan")}, "shaping_cap"),
    ({"bonus": 1}, "unknown reward settings"),
])
def test_bad_reward_settings_are_refused_by_name(settings, match):
    with pytest.raises(ValueError, match=match):
        RewardConfig.from_dict(settings)


def test_shaping_is_withheld_when_the_final_candidate_is_not_correct():
    r = score(v(status="incorrect"), RewardConfig(verify_bonus=0.5), shaping=0.5)
    assert r.value == -1.0 and r.shaping == 0.0 and "withheld" in r.reason


def test_a_correct_candidate_with_sanitizer_errors_is_paid_minus_one():
    assert milestone({**v(), "sanitizer": {"ran": True, "errors": 3}}).milestone == -1
    assert milestone({**v(), "sanitizer": {"ran": True, "errors": 0}}).milestone == 3
    assert milestone({**v(), "sanitizer": {"ran": False, "errors": None}}).milestone == 3
