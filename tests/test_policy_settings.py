"""The policy's settings are declared once (judge.policy, judge.settings): every user setting has one
flag, with the declaration's help, on every command that takes it; the engineer's objective carries
the same settings under the same keys, and reads and writes its file format unchanged."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from conftest import cli_commands, shown_options
from kernelwright.agent import objective as objective_mod
from kernelwright.agent.objective import Objective, load_config, merge
from kernelwright.cli import build_parser
from kernelwright.flags import add_policy_flags, policy_from_args
from kernelwright.judge.policy import OBJECTIVE_SETTINGS, SETTINGS, USER_SETTINGS, Policy, TimingConfig, policy_from_settings
from kernelwright.judge.settings import Spec, setting, specs

ROOT = Path(__file__).resolve().parents[1]


COMMANDS = cli_commands(build_parser())


def test_every_user_setting_has_one_flag_on_eval_and_bench_with_the_declared_help():
    flags = [s.setting.flag for s in USER_SETTINGS]
    assert len(flags) == len(set(flags)), "two settings share a flag"
    for name in ("eval", "bench"):
        shown = shown_options(COMMANDS[name])
        for spec in USER_SETTINGS:
            actions = [a for a in COMMANDS[name]._actions if a.dest == spec.key and a.help != argparse.SUPPRESS]
            assert [a.option_strings for a in actions] == [[spec.setting.flag]], f"{name}: {spec.key} {actions}"
            assert shown[spec.setting.flag].help == spec.setting.help


def test_a_policy_flag_means_one_thing_on_every_command():
    """Wherever a command shows a policy flag, it is the generated one: same help, same parse."""
    by_flag = {s.setting.flag: s for s in USER_SETTINGS}
    seen = set()
    for name, parser in COMMANDS.items():
        for flag, action in shown_options(parser).items():
            if flag in by_flag:
                spec = by_flag[flag]
                assert (action.dest, action.help, action.default) == (spec.key, spec.setting.help, None), f"{name} {flag}"
                seen.add(flag)
    assert seen == set(by_flag)


def test_the_objective_commands_take_every_objective_setting():
    for name in ("optimize", "workspace init", "workspace import"):
        shown = shown_options(COMMANDS[name])
        assert {s.setting.flag for s in OBJECTIVE_SETTINGS} <= set(shown), name
    assert "--preset" not in shown_options(COMMANDS["optimize"])  # an objective states its rules itself


def test_every_policy_field_is_declared_or_is_the_timing_config():
    """A field users could never reach by mistake: each is a setting (checked), or internal by name."""
    declared = {s.path.split(".")[0] for s in SETTINGS}
    internal = {"seeds", "timing"}  # fixed seeds (reproduction, the wire); the timing config (its budget is a setting)
    assert {f.name for f in dataclasses.fields(Policy)} == declared | internal


def test_flags_build_the_policy_the_judge_gets():
    p = build_parser()
    args = p.parse_args(["eval", "p.py", "c.py", "--precision", "bf16", "--atol", "0.5", "--seeds", "2", "--allow-library", "cublas",
                         "--allow-library", "cudnn", "--no-compile-baseline", "--correctness-only", "--timing-budget-s", "3",
                         "--sandbox", "off", "--size", "cpu", "--allow-torch-compute", "--sanitize"])
    policy = policy_from_args(args)
    assert (policy.precision, policy.atol, policy.rtol, policy.n_seeds, policy.libraries) == ("bf16", 0.5, None, 2, ("cublas", "cudnn"))
    assert (policy.compile_baseline, policy.time_candidate, policy.timing.budget_s, policy.sandbox, policy.size) == (False, False, 3.0, "off", "cpu")
    assert policy.allow_torch_compute and policy.sanitize
    assert policy_from_args(p.parse_args(["eval", "p.py", "c.py"])) == Policy()
    assert not policy_from_args(p.parse_args(["eval", "p.py", "c.py", "--baselines", "skip"])).compile_baseline


def test_a_preset_keeps_its_values_where_no_flag_is_given_and_yields_where_one_is():
    p = build_parser()
    policy = policy_from_args(p.parse_args(["eval", "p.py", "c.py", "--preset", "kernelbench"]))
    assert (policy.n_seeds, policy.atol, policy.timing.min_runs, policy.timing.budget_s) == (5, 1e-2, 100, 600.0)
    policy = policy_from_args(p.parse_args(["eval", "p.py", "c.py", "--preset", "kernelbench", "--seeds", "2", "--timing-budget-s", "9"]))
    assert (policy.n_seeds, policy.timing.budget_s, policy.timing.min_runs, policy.preset) == (2, 9.0, 100, "kernelbench")


def test_a_refused_value_is_a_usage_error_that_names_it():
    from kernelwright.errors import UsageError

    with pytest.raises(UsageError, match="seeds must be at least 1, got 0"):
        policy_from_args(build_parser().parse_args(["eval", "p.py", "c.py", "--seeds", "0"]))
    with pytest.raises(UsageError, match="unknown libraries \\['mkl'\\]"):
        policy_from_args(build_parser().parse_args(["eval", "p.py", "c.py", "--allow-library", "mkl"]))
    with pytest.raises(ValueError, match="unknown policy settings \\['speed'\\]"):
        policy_from_settings({"speed": 2})


def test_old_flag_names_still_parse_to_the_same_setting():
    p = build_parser()
    assert policy_from_args(p.parse_args(["eval", "p.py", "c.py", "--budget-s", "3"])).timing.budget_s == 3.0
    policy = policy_from_args(p.parse_args(["baseline", "--mode", "max-autotune-no-cudagraphs", "--no-compile"]))
    assert (policy.compile_mode, policy.compile_baseline) == ("max-autotune-no-cudagraphs", False)


# -- the objective -------------------------------------------------------------------------------


def test_the_objective_carries_each_objective_setting_with_the_policys_key_and_default():
    fields = {f.name: f for f in dataclasses.fields(Objective)}
    for spec in OBJECTIVE_SETTINGS:
        assert spec.key in fields and fields[spec.key].default == spec.default, spec.key
    keys = {s.key: s.path for s in OBJECTIVE_SETTINGS}
    assert keys["seeds"] == "n_seeds" and keys["timing_budget_s"] == "timing.budget_s"  # the file format's names
    assert Objective().policy() == Policy()
    assert {"preset", "time_candidate", "sanitize"}.isdisjoint(fields)  # the agent decides those per step


def test_the_objective_round_trips_through_json_and_toml(tmp_path):
    o = Objective(target_speedup=1.5, strategy="tree", precision="tf32", atol=1e-3, libraries=["cublas"], seeds=2,
                  timing_budget_s=7.0, baselines="skip", size="cpu", sanitize_timeout_s=30.0)
    d = o.to_dict()
    assert d["libraries"] == ["cublas"] and d["seeds"] == 2 and d["timing_budget_s"] == 7.0
    assert Objective.from_dict(json.loads(json.dumps(d))) == o
    cfg = tmp_path / "run.toml"
    cfg.write_text('[objective]\nprecision = "bf16"\nlibraries = ["cudnn"]\nseeds = 4\ntiming_budget_s = 2.5\natol = 1e-3\n')
    merged = merge(load_config(cfg), {"seeds": 5, "atol": None})
    assert (merged.precision, merged.libraries, merged.seeds, merged.timing_budget_s, merged.atol) == ("bf16", ("cudnn",), 5, 2.5, 1e-3)
    policy = merged.policy()
    assert (policy.precision, policy.libraries, policy.n_seeds, policy.timing.budget_s, policy.atol) == ("bf16", ("cudnn",), 5, 2.5, 1e-3)
    assert not o.policy().compile_baseline  # baselines = skip
    with pytest.raises(ValueError, match="seeds must be at least 1, got 0"):
        Objective(seeds=0)
    with pytest.raises(ValueError, match="unknown objective settings \\['n_seeds'\\]"):
        Objective.from_dict({"n_seeds": 3})


def test_a_config_value_of_the_wrong_type_is_refused_by_name(tmp_path):
    """A quoted number in a run config was a TypeError deep in the policy (exit 1, no name); now the
    setting's check names it, and the command exits 2 as for any malformed input."""
    cfg = tmp_path / "run.toml"
    for line, message in (('seeds = "3"', "seeds must be an integer, got '3'"), ('libraries = "cublas"', "libraries must be a list"),
                          ('atol = "1e-3"', "atol must be a number"), ('allow_torch_compute = "yes"', "must be true or false")):
        cfg.write_text(line + "\n")
        with pytest.raises(ValueError, match=message):
            merge(load_config(cfg), {})
    assert Objective.from_dict({"libraries": None}).libraries == ()


def test_recorded_objectives_still_load():
    for path in sorted((ROOT / "examples" / "recordings").glob("*.json")):
        recorded = json.loads(path.read_text())["objective"]
        again = Objective.from_dict(recorded).to_dict()
        assert {k: again[k] for k in recorded} == recorded, path.name


def test_the_objective_flags_set_the_objective():
    from kernelwright.agent.commands import _objective

    args = build_parser().parse_args(["optimize", "p.py", "--model", "openai:m", "--rtol", "0.25", "--allow-library", "cublas",
                                      "--no-compile-baseline", "--seeds", "2", "--sandbox", "strict", "--no-sanitize"])
    o = _objective(args, "openai:m")
    assert (o.rtol, o.libraries, o.compile_baseline, o.seeds, o.sandbox, o.sanitize_final) == (0.25, ("cublas",), False, 2, "strict", False)
    assert Objective() == _objective(build_parser().parse_args(["optimize", "p.py", "--model", "openai:m"]), "openai:m")


def test_a_setting_declared_on_the_policy_reaches_flags_and_objective_with_no_other_edit(monkeypatch):
    """A new field declared with setting() becomes a flag (with its help), an objective field (with
    its default and checks) and a policy value, through the same code the real ones take."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Wider(Policy):
        warp_limit: int = setting(8, flag="--warp-limit", minimum=1, help="warps a block may use (default 8)")

    new = [s for s in specs(Wider) if s.key == "warp_limit"]
    assert new == [Spec(path="warp_limit", key="warp_limit", annotation="int", default=8, setting=new[0].setting)]
    monkeypatch.setattr(objective_mod, "OBJECTIVE_SETTINGS", OBJECTIVE_SETTINGS + tuple(new))

    @dataclasses.dataclass(frozen=True, kw_only=True)
    @objective_mod._with_policy_settings
    class Goal:
        target_speedup: float | None = None

    assert Goal().warp_limit == 8 and Goal(warp_limit=4).warp_limit == 4 and Goal().size == "auto"
    import kernelwright.flags as flags

    monkeypatch.setattr(flags, "OBJECTIVE_SETTINGS", OBJECTIVE_SETTINGS + tuple(new))
    monkeypatch.setattr(flags, "USER_SETTINGS", USER_SETTINGS + tuple(new))
    p = argparse.ArgumentParser()
    add_policy_flags(p, objective=True)
    assert shown_options(p)["--warp-limit"].help == "warps a block may use (default 8)"
    assert flags.policy_settings(p.parse_args(["--warp-limit", "2", "--seeds", "4"])) == {"warp_limit": 2, "seeds": 4}
    assert new[0].problem(0) == "warp_limit must be at least 1, got 0"
    with pytest.raises(ValueError, match="warp_limit must be at least 1"):
        Wider(warp_limit=0)


def test_timing_budget_is_checked_where_it_is_declared():
    with pytest.raises(ValueError, match="budget_s must be positive, got 0"):
        TimingConfig(budget_s=0)
