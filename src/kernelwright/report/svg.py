"""Inline SVG charts for the HTML report: plain strings, no scripts, no remote resources.

Every piece of text that reaches a chart (labels, problem names) is escaped here, so the caller may
mark the result safe. Nothing here imports jinja2 or torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Optional, Sequence

WIDTH, HEIGHT = 640, 320  # default drawing size, px (the page scales it down on narrow screens)
LEFT, RIGHT, TOP, BOTTOM = 60, 34, 40, 50  # margins: axis labels left and below, legend above, rule labels right


@dataclass(frozen=True)
class Axis:
    """One axis: its range, its ticks and its label."""

    lo: float  # smallest value shown
    hi: float  # largest value shown
    ticks: tuple[tuple[float, str], ...]  # (value, text) pairs
    label: str  # axis title
    log2: bool = False  # place values on a log2 scale (lo and hi must be positive)


@dataclass(frozen=True)
class Series:
    """One line of a line chart; a point whose y is None breaks the line."""

    label: str  # legend text
    color: str  # stroke colour
    points: tuple[tuple[float, Optional[float]], ...]  # (x, y) pairs in axis units
    dash: str = ""  # stroke-dasharray, so series differ without colour too


@dataclass(frozen=True)
class Rule:
    """A reference line across the plot, e.g. the 1x line."""

    value: float  # where it sits, in axis units
    label: str  # text beside it
    color: str = "#555"  # stroke colour
    left: bool = False  # put the label before the line (vertical rules), so close rules do not collide


@dataclass(frozen=True)
class Frame:
    """The drawing size and the plot area inside it."""

    width: int = WIDTH  # px
    height: int = HEIGHT  # px

    @property
    def x0(self) -> float:
        return LEFT

    @property
    def x1(self) -> float:
        return self.width - RIGHT

    @property
    def y0(self) -> float:
        return self.height - BOTTOM

    @property
    def y1(self) -> float:
        return TOP


def linear_axis(lo: float, hi: float, label: str, n_ticks: int = 5, fmt: str = "{:g}") -> Axis:
    """A linear axis covering lo to hi, widened to round ticks (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    raw = max(hi - lo, 1e-9) / n_ticks
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    values = [round(i * step, 9) for i in range(first, last + 1)]
    return Axis(values[0], values[-1], tuple((v, fmt.format(v)) for v in values), label)


def log2_axis(values: Sequence[float], label: str) -> Axis:
    """A log2 axis that covers the values and always shows 0.5x to 2x, ticks at powers of two."""
    logs = [math.log2(v) for v in values if v > 0] + [-1.0, 1.0]
    lo, hi = math.floor(min(logs)), math.ceil(max(logs))
    step = max(1, math.ceil((hi - lo) / 8))
    ticks = tuple((2.0 ** e, _power_text(e)) for e in range(lo, hi + 1, step))
    return Axis(2.0 ** lo, 2.0 ** hi, ticks, label, log2=True)


def _power_text(exponent: int) -> str:
    value = 2.0 ** exponent
    return f"{value:g}x" if value >= 1 / 64 else f"2^{exponent}x"


def _place(value: float, axis: Axis, a: float, b: float) -> float:
    """Map a value on the axis to a pixel between a (at lo) and b (at hi)."""
    f = math.log2 if axis.log2 else float
    lo, hi, v = f(axis.lo), f(axis.hi), f(max(value, axis.lo) if axis.log2 else value)
    return a + (b - a) * (v - lo) / (hi - lo)


def _open(frame: Frame, title: str) -> list[str]:
    t = escape(title)
    return [f'<svg class="chart" width="{frame.width}" height="{frame.height}" '
            f'viewBox="0 0 {frame.width} {frame.height}" role="img" aria-label="{t}"><title>{t}</title>',
            f'<rect x="{frame.x0}" y="{frame.y1}" width="{frame.x1 - frame.x0}" height="{frame.y0 - frame.y1}" class="plot"/>']


def _x_axis(frame: Frame, axis: Axis) -> list[str]:
    out = []
    for value, text in axis.ticks:
        x = _place(value, axis, frame.x0, frame.x1)
        out.append(f'<line x1="{x:.1f}" y1="{frame.y1}" x2="{x:.1f}" y2="{frame.y0}" class="grid"/>'
                   f'<text x="{x:.1f}" y="{frame.y0 + 16}" text-anchor="middle">{escape(text)}</text>')
    mid = (frame.x0 + frame.x1) / 2
    out.append(f'<text x="{mid:.1f}" y="{frame.height - 10}" text-anchor="middle" class="axis">{escape(axis.label)}</text>')
    return out


def _y_axis(frame: Frame, axis: Axis) -> list[str]:
    out = []
    for value, text in axis.ticks:
        y = _place(value, axis, frame.y0, frame.y1)
        out.append(f'<line x1="{frame.x0}" y1="{y:.1f}" x2="{frame.x1}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{frame.x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(text)}</text>')
    mid = (frame.y0 + frame.y1) / 2
    out.append(f'<text x="14" y="{mid:.1f}" text-anchor="middle" class="axis" '
               f'transform="rotate(-90 14 {mid:.1f})">{escape(axis.label)}</text>')
    return out


def _legend(frame: Frame, series: Sequence[Series]) -> list[str]:
    out, x = [], frame.x0
    for s in series:
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        out.append(f'<line x1="{x}" y1="18" x2="{x + 24}" y2="18" stroke="{s.color}" stroke-width="2.5"{dash}/>'
                   f'<text x="{x + 30}" y="22">{escape(s.label)}</text>')
        x += 40 + 7 * len(s.label)
    return out


def _polyline(frame: Frame, s: Series, x: Axis, y: Axis) -> list[str]:
    """The series as line segments (broken at missing points) with a dot on every point."""
    out, run = [], []
    dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
    for px, py in list(s.points) + [(0.0, None)]:
        if py is None:
            if len(run) > 1:
                out.append(f'<polyline fill="none" stroke="{s.color}" stroke-width="2.5"{dash} points="{" ".join(run)}"/>')
            run = []
            continue
        cx, cy = _place(px, x, frame.x0, frame.x1), _place(py, y, frame.y0, frame.y1)
        run.append(f"{cx:.1f},{cy:.1f}")
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{s.color}"><title>{escape(s.label)}: '
                   f'{escape(f"{px:g}")}, {escape(f"{py:.4g}")}</title></circle>')
    return out


def _hrule(frame: Frame, rule: Rule, y: Axis) -> str:
    py = _place(rule.value, y, frame.y0, frame.y1)
    return (f'<line x1="{frame.x0}" y1="{py:.1f}" x2="{frame.x1}" y2="{py:.1f}" stroke="{rule.color}" '
            f'stroke-width="1.5" stroke-dasharray="6 3"/><text x="{frame.x1 + 4}" y="{py + 4:.1f}" '
            f'class="rule">{escape(rule.label)}</text>')


def _vrule(frame: Frame, rule: Rule, x: Axis) -> str:
    px = _place(rule.value, x, frame.x0, frame.x1)
    tx, anchor = (px - 4, "end") if rule.left else (px + 4, "start")
    return (f'<line x1="{px:.1f}" y1="{frame.y1}" x2="{px:.1f}" y2="{frame.y0}" stroke="{rule.color}" '
            f'stroke-width="1.5" stroke-dasharray="6 3"/><text x="{tx:.1f}" y="{frame.y1 + 12}" '
            f'text-anchor="{anchor}" class="rule">{escape(rule.label)}</text>')


def line_chart(series: Sequence[Series], x: Axis, y: Axis, title: str,
               rules: Sequence[Rule] = (), frame: Frame = Frame()) -> str:
    """A line chart with a legend above, ticks on both axes and optional horizontal rules."""
    parts = _open(frame, title) + _x_axis(frame, x) + _y_axis(frame, y)
    parts += [_hrule(frame, r, y) for r in rules]
    for s in series:
        parts += _polyline(frame, s, x, y)
    parts += _legend(frame, series)
    return "".join(parts) + "</svg>"


def strip_chart(points: Sequence[tuple[str, float]], x: Axis, title: str,
                rules: Sequence[Rule] = (), frame: Frame = Frame(height=200), color: str = "#2563eb") -> str:
    """One dot per (name, value) along x; dots close in value are spread over a few lanes."""
    parts = _open(frame, title) + _x_axis(frame, x) + [_vrule(frame, r, x) for r in rules]
    lanes = 5
    step = (frame.y0 - frame.y1 - 30) / (lanes - 1)
    for i, (name, value) in enumerate(sorted(points, key=lambda p: p[1])):
        cx = _place(value, x, frame.x0, frame.x1)
        cy = frame.y1 + 22 + step * (i % lanes)
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{color}" fill-opacity="0.75">'
                     f'<title>{escape(name)}: {value:.3f}x</title></circle>')
    return "".join(parts) + "</svg>"
