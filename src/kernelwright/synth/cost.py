"""The runtime proxy: an eager time on the H200 estimated without a GPU.

A task's model runs once on torch's `meta` device (shapes, no arithmetic) under a dispatch mode that
sees every aten operator eager PyTorch would launch. Each one that is not a view costs
max(FLOPs / rate, bytes read and written / bandwidth) plus a launch; the sum is the raw proxy. FLOPs
come from torch's FLOP counter (matrix products, convolutions, attention); bytes are the operator's
tensor inputs and outputs. Rates are the H200's measured ceilings (judge.roofline, GPU.md) at the
efficiencies below, so the raw proxy is a roofline guess, not a measurement.

`calibrated_ms` maps it through log(t) = intercept + slope * log(proxy), fitted on H200 eager times of
synthesised tasks (`benchmarks/synth_h200.py`); `calibration.json` says which run fitted it and the
rank correlation it reached. The same mode gives the largest tensor and the bytes all outputs take,
which bound a task's memory.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwright.judge import roofline

FLOP_RATE = roofline.MEASURED_FLOPS_PER_S["fp32"] * 0.7  # eager fp32 (no TF32) GEMMs and convolutions
BYTE_RATE = roofline.MEASURED_BYTES_PER_S * 0.7  # eager elementwise and reduction kernels
LAUNCH_MS = 0.004  # one kernel launch, queued behind the previous one
CALIBRATION = Path(__file__).with_name("calibration.json")


@dataclass(frozen=True)
class Cost:
    """What one forward costs, by the roofline proxy."""

    flops: int  # counted FLOPs
    bytes: int  # bytes read and written by non-view operators
    kernels: int  # non-view aten operators (kernels eager launches, about)
    proxy_ms: float  # the raw roofline proxy
    max_tensor_bytes: int  # the largest tensor any operator produced (or the inputs, where the caller adds them)
    out_bytes: int  # bytes of every operator's outputs, summed (a bound on the memory the forward touches)
    parts: tuple[tuple[str, float], ...] = ()  # proxy_ms split by operator class (PART_NAMES), for the calibration


PART_NAMES = ("conv", "deconv3d", "matmul", "memory", "launch")


def part_of(op_name: str, args: tuple = ()) -> str:
    """The operator class an aten operator's time is charged to. Transposed 3-D convolutions have a
    class of their own: eager runs them about 9 times slower than their roofline on the H200, against
    about 2.5 times for other convolutions (benchmarks/results/synth_h200.md)."""
    if "conv" in op_name:
        transposed = len(args) > 6 and args[6] is True  # aten.convolution(input, weight, bias, stride, padding, dilation, transposed, ...)
        return "deconv3d" if transposed and getattr(args[1], "dim", lambda: 0)() == 5 else "conv"
    if op_name in ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear") or "attention" in op_name:
        return "matmul"
    return "memory"


def measure(model: Any, values: list[Any]) -> tuple[Cost, list[Any]]:
    """Run model(*values) (meta tensors) under the counting mode; returns the cost and the outputs."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    totals = {"flops": 0, "bytes": 0, "kernels": 0, "ms": 0.0, "max": 0, "out": 0}
    parts = dict.fromkeys(PART_NAMES, 0.0)

    from kernelwright.judge.inputs import tensor_bytes as nbytes

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
            before = counter.get_total_flops()
            out = func(*args, **(kwargs or {}))
            if getattr(func, "is_view", False) or func.__name__.split(".")[0] in _FREE:
                return out
            flops = counter.get_total_flops() - before
            moved = nbytes(list(args)) + nbytes(list((kwargs or {}).values())) + nbytes(out)
            totals["flops"] += flops
            totals["bytes"] += moved
            totals["kernels"] += 1
            work = max(flops / FLOP_RATE, moved / BYTE_RATE) * 1e3
            totals["ms"] += work + LAUNCH_MS
            parts[part_of(func.__name__.split(".")[0], args)] += work
            parts["launch"] += LAUNCH_MS
            totals["max"] = max(totals["max"], nbytes(out) if isinstance(out, torch.Tensor) else 0)
            totals["out"] += nbytes(out)
            return out

    with counter, Counting(), torch.no_grad():
        out = model(*values)
    cost = Cost(int(totals["flops"]), int(totals["bytes"]), int(totals["kernels"]), float(totals["ms"]), int(totals["max"]), int(totals["out"]),
                tuple(parts.items()))
    return cost, out if isinstance(out, (list, tuple)) else [out]


_FREE = {"detach", "empty", "empty_like", "empty_strided", "lift_fresh", "alias", "_to_copy", "clone"}


def load_calibration(path: Path | None = None) -> dict[str, Any]:
    """The fitted map from raw proxy to H200 milliseconds (identity when none was fitted)."""
    path = path or CALIBRATION
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"intercept": 0.0, "slope": 1.0, "fitted_on": None}
    for key in ("intercept", "slope"):
        if not isinstance(data.get(key), (int, float)):
            raise ValueError(f"{path}: {key} must be a number, got {data.get(key)!r}")
    return data


def calibrated_ms(cost: "Cost | float", calibration: dict[str, Any]) -> float:
    """The H200 estimate: with fitted per-class coefficients, sum(c_k * part_k); with a log-linear fit
    (or none), exp(intercept + slope * log(raw proxy))."""
    coefficients = calibration.get("coefficients")
    if coefficients and isinstance(cost, Cost) and cost.parts:
        return sum(coefficient(coefficients, k) * v for k, v in cost.parts)
    proxy_ms = cost.proxy_ms if isinstance(cost, Cost) else float(cost)
    if proxy_ms <= 0:
        return 0.0
    return math.exp(calibration.get("intercept", 0.0) + calibration.get("slope", 1.0) * math.log(proxy_ms))


FALLBACK = {"deconv3d": "conv"}  # a calibration fitted before a class existed, or without it: the class it was part of


def coefficient(coefficients: dict[str, float], part: str) -> float:
    """A class's fitted coefficient; a class the fit never saw takes the one it was split from (else 1)."""
    if part in coefficients:
        return float(coefficients[part])
    return float(coefficients.get(FALLBACK.get(part, part), 1.0))


def fit_parts(parts: list[dict[str, float]], measured_ms: list[float]) -> dict[str, float]:
    """Per-class coefficients c minimising the relative error of sum(c_k * part_k) against the measured
    times (least squares on rows divided by the measured time); a class whose coefficient comes out
    negative is dropped and the rest refitted (its coefficient is then 0). A class no task has is left
    out, so `coefficient` falls back for it rather than pricing it at 0."""
    import numpy as np

    present = [k for k in PART_NAMES if any(p.get(k, 0.0) > 0 for p in parts)]
    names = list(present)
    while names:
        a = np.array([[p.get(k, 0.0) / m for k in names] for p, m in zip(parts, measured_ms)])
        c, *_ = np.linalg.lstsq(a, np.ones(len(parts)), rcond=None)
        if (c >= 0).all():
            return {**dict.fromkeys(present, 0.0), **{k: float(v) for k, v in zip(names, c)}}
        names = [k for k, v in zip(names, c) if v >= 0]
    raise ValueError("no class of the proxy explains the measured times")


def fit(proxy_ms: list[float], measured_ms: list[float]) -> dict[str, Any]:
    """Least squares of log(measured) on log(proxy), with Spearman's rank correlation of the two."""
    pairs = [(math.log(p), math.log(m)) for p, m in zip(proxy_ms, measured_ms) if p > 0 and m > 0]
    if len(pairs) < 3:
        raise ValueError(f"a calibration needs at least 3 tasks with both times, got {len(pairs)}")
    xs, ys = zip(*pairs)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in pairs) / sxx if sxx else 1.0
    intercept = my - slope * mx
    resid = [y - (intercept + slope * x) for x, y in pairs]
    return {"intercept": intercept, "slope": slope, "n": len(pairs), "spearman": spearman(list(xs), list(ys)),
            "median_abs_log_error": sorted(abs(r) for r in resid)[len(resid) // 2]}


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (ties get their average rank)."""
    ra, rb = _ranks(a), _ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / var if var else 0.0


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks
