"""Flags shared by the commands, each defined once here: the judging policy's (generated from its
declaration in judge.policy, read back by policy_from_args), --device, --json, --store, and earlier
flag names still accepted."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterable

from kernelwright.errors import UsageError
from kernelwright.judge.policy import OBJECTIVE_SETTINGS, USER_SETTINGS, Policy, policy_from_settings
from kernelwright.judge.settings import OFF, ON, REPEAT, Spec

DEVICES = ("auto", "cuda", "cpu")
JSON_HELP = "print the result as JSON on stdout and nothing else there"
STORE_HELP = "SQLite store path (default: $KERNELWRIGHT_STORE or the user data dir)"


def device_flag(p: argparse.ArgumentParser, help: str = "where to run (default: auto)") -> None:  # noqa: A002 - argparse's word
    """--device auto|cuda|cpu (auto: cuda when present); the help may say what runs there."""
    p.add_argument("--device", default="auto", choices=DEVICES, help=help)


def json_flag(p: argparse.ArgumentParser, help: str = JSON_HELP) -> None:  # noqa: A002
    """--json: the result as JSON on stdout and nothing else there; the help may say what the JSON holds."""
    p.add_argument("--json", action="store_true", help=help)


def store_flag(p: argparse.ArgumentParser, help: str = STORE_HELP) -> None:  # noqa: A002
    p.add_argument("--store", type=Path, default=None, help=help)


def no_store_flag(p: argparse.ArgumentParser, help: str = "do not record anything in the store") -> None:  # noqa: A002
    p.add_argument("--no-store", action="store_true", help=help)


def common_flags(p: argparse.ArgumentParser) -> None:
    """--device, --json, --store and --no-store."""
    device_flag(p)
    json_flag(p)
    store_flag(p)
    no_store_flag(p)


def old_name(p: argparse.ArgumentParser, old: str, dest: str, **kw: Any) -> None:
    """A flag's earlier name, still accepted, not shown: each flag has one name across the commands."""
    p.add_argument(old, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kw)


def _selected(only: Iterable[str] | None, objective: bool) -> tuple[Spec, ...]:
    specs = OBJECTIVE_SETTINGS if objective else USER_SETTINGS
    if only is None:
        return specs
    wanted = set(only)
    assert wanted <= {s.key for s in specs}, sorted(wanted - {s.key for s in specs})
    return tuple(s for s in specs if s.key in wanted)


def _add(p: argparse.ArgumentParser, spec: Spec) -> None:
    """One setting's flag (and its earlier names); the default None means not given."""
    s = spec.setting
    if spec.kind in (ON, OFF):
        kw: dict[str, Any] = dict(action="store_const", const=spec.kind == ON)
    else:
        kw = dict(type=spec.type, choices=s.choices if spec.kind != REPEAT else None, metavar=s.metavar,
                  action="append" if spec.kind == REPEAT else "store")
    p.add_argument(s.flag, dest=spec.key, default=None, help=s.help, **kw)
    for old in s.old:
        old_name(p, old, spec.key, **kw)


def add_policy_flags(p: argparse.ArgumentParser, *, only: Iterable[str] | None = None, objective: bool = False) -> None:
    """The judging policy's flags, one per user setting (those keyed in only; objective: those an
    engineer's objective carries), with the help its declaration gives; read back by
    policy_settings / policy_from_args."""
    for spec in _selected(only, objective):
        _add(p, spec)


def policy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The policy settings given on the command line, by key (flags left out are not given)."""
    given = {s.key: getattr(args, s.key, None) for s in USER_SETTINGS}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if v is not None}


def policy_from_args(args: argparse.Namespace) -> Policy:
    """The policy of the flags given (the rest: the defaults, or the preset's); a usage error names a refused value."""
    try:
        return policy_from_settings(policy_settings(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
