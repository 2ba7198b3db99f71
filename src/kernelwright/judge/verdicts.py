"""Assembling a Verdict as the flow goes: steps, guards, numbers, and the system it ran on."""

from __future__ import annotations

import datetime as _dt
import functools
import platform
import shutil
import subprocess
from typing import Any, Callable

import kernelwright
from kernelwright.judge import guards, pricing
from kernelwright.judge.policy import ALL_STEPS, TIMING_STEPS, Policy
from kernelwright.judge.sandbox_check import not_started
from kernelwright.core.records import (
    MODULE_MODE, BaselineSource, Guard, Resources, Status, Step, SystemInfo, Timing, Verdict, truncate,
)
from kernelwright.judge.workers import physical_gpu
from kernelwright.problems.loader import Problem


class Stop(Exception):
    """Ends the flow early with a verdict status and a message for the log."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


def system_info(device: str, gpu_index: int, meta: dict[str, Any] | None = None) -> SystemInfo:
    """Where the verdict was made. GPU name, driver, torch and CUDA versions as the reference child
    reported them; before that child answered, from nvidia-smi and torch imported here."""
    meta = meta or {}
    gpu, driver = meta.get("gpu"), meta.get("driver")
    if device == "cuda" and not (gpu and driver):
        smi_gpu, smi_driver = _smi(gpu_index)
        gpu, driver = gpu or smi_gpu, driver or smi_driver
    torch_version, cuda = meta.get("torch"), meta.get("cuda")
    if not torch_version:
        torch_version, cuda = torch_versions()
    return SystemInfo(
        gpu=gpu if device == "cuda" else None, driver=driver if device == "cuda" else None, cuda=cuda,
        torch=torch_version, python=platform.python_version(), kernelwright=kernelwright.__version__,
    )


@functools.lru_cache(maxsize=1)
def torch_versions() -> tuple[str, str | None]:
    """torch's version and its CUDA version, read from torch/version.py without importing torch
    (seconds of a verdict that ended before any child answered); imported where that file says
    nothing plain."""
    import ast
    import importlib.util
    import sys
    from pathlib import Path

    from kernelwright import pysource

    if "torch" not in sys.modules:
        try:
            spec = importlib.util.find_spec("torch")
            folder = Path(list(spec.submodule_search_locations or [])[0]) if spec else None
            tree = pysource.parse((folder / "version.py").read_text()) if folder else None
        except (OSError, SyntaxError, ValueError, IndexError, ImportError):
            tree = None
        values = {}
        for node in tree.body if tree else []:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name) and node.value is not None:
                try:
                    values[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
        if isinstance(values.get("__version__"), str) and "cuda" in values:
            return values["__version__"], values["cuda"]
    import torch

    return torch.__version__, torch.version.cuda


@functools.lru_cache(maxsize=8)
def _smi(gpu_index: int) -> tuple[str | None, str | None]:
    if not shutil.which("nvidia-smi"):
        return None, None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={physical_gpu(gpu_index)}", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.strip()
        gpu, driver = (s.strip() for s in out.split(",", 1))
        return gpu, driver
    except (OSError, ValueError, subprocess.SubprocessError):  # physical_gpu's ValueError too
        return None, None


class VerdictBuilder:
    """Collects what the flow learns; `finish` turns it into a Verdict."""

    def _policy_record(self) -> dict[str, Any]:
        """The policy as judged: the device, and the timing budget in force where the policy named none."""
        record = {**self.policy.to_dict(), "device": self.device}
        timing = dict(record.get("timing") or {})
        if timing.get("budget_s") is None:
            timing["budget_s"] = self.policy.timing.budget_for(cuda=self.device == "cuda")
            record["timing"] = timing
        return record

    def __init__(self, problem: Problem, policy: Policy, device: str) -> None:
        self.problem, self.policy, self.device = problem, policy, device
        self.size: str | None = None  # the size the problem runs at (problems.sizes: full or cpu), once resolved
        self.candidate: dict[str, Any] = {"hash": None, "build_path": None}
        self.workers: dict[str, Any] | None = None  # the verdict's `workers` field
        self.memory: dict[str, Any] | None = None  # the verdict's `memory` field
        self.sandbox: dict[str, Any] | None = None  # the verdict's `sandbox` field (judge.sandbox_check.record)
        self.jit_from: Callable[[], dict[str, Any] | None] | None = None  # the verdict's `jit` field, read at the end (judge.jit_clock)
        self.device_wait_s: dict[str, float] = {}  # seconds waited for the device lock, by mode (workers.device_wait_s)
        self.build_s: float | None = None
        self.resources: Resources | None = None
        self.log = ""
        self.static_findings: list[dict[str, Any]] = []  # advisory (judge.static)
        self.steps: dict[str, Step] = {}
        self.guards: list[Guard] = []
        self.meta: dict[str, Any] = {}
        self.numbers: dict[str, Any] = {}
        self.timing: Timing | None = None

    def step(self, name: str, ran: bool, reason: str = "") -> None:
        assert name in ALL_STEPS, name
        self.steps[name] = Step(name, ran, reason)

    def off_or(self, name: str, reason_if_on: str = "") -> bool:
        """Record a step switched off by the policy; return whether it is on."""
        if not self.policy.enabled(name):
            self.step(name, False, "switched off by the policy (ablation)")
            return False
        if reason_if_on:
            self.step(name, False, reason_if_on)
            return False
        return True

    def guard(self, name: str, fired: bool, detail: str = "") -> None:
        """Record a guard's outcome; a later outcome of the same guard replaces the earlier one. Only
        guards of the registry (judge.guards) may be recorded."""
        if name not in guards.names():  # the judge's own mistake (an infra_error), never a candidate's
            raise RuntimeError(f"guard {name!r} is not in judge.guards' registry")
        self.guards = [g for g in self.guards if g.name != name] + [Guard(name, fired, truncate(detail, 800))]

    def set_problem_meta(self, meta: dict[str, Any]) -> None:
        self.meta = meta

    def timing_skipped(self, reason: str) -> None:
        for name in TIMING_STEPS + ("timed_recheck",):
            self.steps.setdefault(name, Step(name, False, reason))

    def finish(self, status: Status, message: str = "") -> Verdict:
        if message:
            self.log = truncate(message)
        for name in ALL_STEPS:
            self.steps.setdefault(name, Step(name, False, f"not reached: the evaluation ended as {status.value}"))
        n = self.numbers
        return Verdict(
            status=status, problem={**self.problem.to_dict(), "size": self.size, "mode": MODULE_MODE}, candidate=self.candidate,
            policy=self._policy_record(), build_s=_round(self.build_s),
            runtime_ms=n.get("runtime_ms"), eager_ms=n.get("eager_ms"), compile_ms=n.get("compile_ms"),
            baseline_source=BaselineSource(n.get("baseline_source", "measured")) if n.get("eager_ms") is not None else None,
            speedup_vs_eager=n.get("speedup_vs_eager"), speedup_vs_compile=n.get("speedup_vs_compile"),
            speedup_vs_best=n.get("speedup_vs_best"), max_abs_error=n.get("max_abs_error"),
            max_rel_error=n.get("max_rel_error"), floor_ms=n.get("floor_ms"), efficiency=n.get("efficiency"),
            guards=tuple(self.guards), static_findings=tuple(self.static_findings), steps=tuple(self.steps[s] for s in ALL_STEPS),
            timing=self.timing, resources=self.resources, log=self.log,
            system=system_info(self.device, self.policy.gpu_index, self.meta),
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), memory=self.memory,
            workers=self.workers if self.workers is None else {**self.workers, "device_wait_s": {k: round(v, 3) for k, v in self.device_wait_s.items()}},
            sandbox=self.sandbox if self.sandbox is not None else not_started(self.policy.sandbox),
            pricing_version=pricing.VERSION if n.get("runtime_ms") is not None or n.get("eager_ms") is not None else None,
            jit=self.jit_from() if self.jit_from is not None else None,
        )


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
