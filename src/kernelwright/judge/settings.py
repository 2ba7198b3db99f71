"""The policy's settings, declared once: on the dataclass field itself.

A field declared with `setting(...)` carries its checks and, when users may set it, its command-line
flag, its help text and its key (its name in run config files, objectives and parsed flags). The
policy's validation, the CLI's flags (kernelwright.flags) and the engineer's objective
(agent.objective) all read them here, so a new policy field is one declaration.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# kinds of flag, from the field's type and default
VALUE = "value"  # --flag VALUE
REPEAT = "repeat"  # --flag VALUE, repeatable: a tuple
ON = "on"  # a switch that sets True (the field defaults to False)
OFF = "off"  # a switch that sets False (the field defaults to True)

_TYPES = {"str": str, "int": int, "float": float}


@dataclass(frozen=True, kw_only=True)
class Setting:
    """How one policy field is checked and, when it has a flag, set by users."""

    flag: str | None = None  # its command-line flag; None: internal (checked, never set from the command line)
    help: str = ""  # the flag's help text
    key: str | None = None  # its name in run configs, objectives and parsed flags; None: the field's name
    choices: tuple[Any, ...] | None = None  # allowed values (of each element, for a tuple-valued field)
    minimum: float | None = None  # smallest allowed value
    positive: bool = False  # must be above 0
    objective: bool = True  # part of the engineer's objective (agent runs, workspaces), when it has a flag
    old: tuple[str, ...] = ()  # the flag's earlier names, still accepted, not shown
    metavar: str | None = None  # the flag's value in --help
    noun: str | None = None  # what unknown values are called in errors ("protocol steps"); None: the field's name

    def __post_init__(self) -> None:
        assert self.flag is None or (self.flag.startswith("--") and self.help), self
        assert not self.old or self.flag, self

    def problem(self, name: str, value: Any, default: Any, annotation: str) -> str | None:
        """What is wrong with the value of the field called name, in a sentence; None when it is fine."""
        if value is None and default is None:
            return None
        wrong = _wrong_type(name, value, default, annotation)
        if wrong:
            return wrong
        if isinstance(default, (tuple, frozenset)):
            bad = sorted(v for v in value if v not in self.choices) if self.choices is not None else []
            return f"unknown {self.noun or name} {bad}; known: {self.choices}" if bad else None
        if self.choices is not None and value not in self.choices:
            return f"unknown {name} {value!r}; known: {self.choices}"
        if self.positive and not value > 0:
            return f"{name} must be positive, got {value}"
        if self.minimum is not None and value < self.minimum:
            return f"{name} must be at least {self.minimum:g}, got {value}"
        return None


# what a value of each written type may be (a config file's text or number must match)
_KINDS = {"str": ((str,), "a string"), "int": ((int,), "an integer"), "float": ((int, float), "a number"), "bool": ((bool,), "true or false")}


def _wrong_type(name: str, value: Any, default: Any, annotation: str) -> str | None:
    if isinstance(default, (tuple, frozenset)):
        ok = isinstance(value, (tuple, list, set, frozenset))
        return None if ok else f"{name} must be a list, got {value!r}"
    kinds, words = _KINDS.get(annotation.split("|")[0].strip(), ((object,), ""))
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        return f"{name} must be {words}, got {value!r}"
    return None


def setting(default: Any, **kw: Any) -> Any:
    """A dataclass field with this default, described by Setting(**kw)."""
    return dataclasses.field(default=default, metadata={"setting": Setting(**kw)})


@dataclass(frozen=True)
class Spec:
    """A setting resolved against its field: where it lives, its key, type and default."""

    path: str  # the field, dotted for a nested config ("timing.budget_s")
    key: str  # its name in configs, objectives and parsed flags
    annotation: str  # the field's type as written
    default: Any  # the field's default
    setting: Setting  # flag, help, checks

    @property
    def kind(self) -> str:
        """VALUE, REPEAT, ON or OFF."""
        if isinstance(self.default, bool):
            return OFF if self.default else ON
        return REPEAT if isinstance(self.default, tuple) else VALUE

    @property
    def type(self) -> type:
        """What a VALUE flag's text is parsed as (str for a REPEAT flag's elements)."""
        base = self.annotation.split("|")[0].strip()
        return _TYPES.get(base, str)

    def problem(self, value: Any) -> str | None:
        """What is wrong with this value, named by the key; None when it is fine."""
        return self.setting.problem(self.key, value, self.default, self.annotation)


def specs(cls: type, prefix: str = "") -> list[Spec]:
    """Every setting of a dataclass in field order, nested configs (a field whose factory is a
    dataclass) included with dotted paths."""
    found = []
    for f in dataclasses.fields(cls):
        if "setting" in f.metadata:
            s = f.metadata["setting"]
            found.append(Spec(path=prefix + f.name, key=s.key or f.name, annotation=str(f.type), default=f.default, setting=s))
        elif dataclasses.is_dataclass(f.default_factory):
            found += specs(f.default_factory, prefix + f.name + ".")
    return found


def check(obj: Any) -> None:
    """ValueError naming the first field of this dataclass whose value its setting refuses."""
    for f in dataclasses.fields(obj):
        if "setting" in f.metadata:
            why = f.metadata["setting"].problem(f.name, getattr(obj, f.name), f.default, str(f.type))
            if why:
                raise ValueError(why)
