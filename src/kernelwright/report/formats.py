"""Values of a bench as report text: missing values as a dash, numbers in the report's formats.

Any value may be null, missing, NaN or of an unexpected type; every function here turns it into text
without raising.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

DASH = "–"  # a missing value


def as_dict(value: Any) -> dict:
    """The value if it is a dict, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    """The value if it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def number(value: Any) -> Optional[float]:
    """A finite number, or None for anything else (null, text, NaN, booleans)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def fmt_ms(value: Any) -> str:
    """Milliseconds with 4 significant digits."""
    n = number(value)
    if n is None:
        return DASH
    return f"{n:.0f}" if abs(n) >= 1e4 else f"{n:.4g}"


def ms(value: Any) -> str:
    """Milliseconds with their unit, or a dash."""
    text = fmt_ms(value)
    return text if text == DASH else text + " ms"


def fmt_x(value: Any) -> str:
    """A speedup, e.g. 1.234x."""
    n = number(value)
    return DASH if n is None else f"{n:.3f}x"


def fmt_pct(value: Any) -> str:
    """A rate in [0, 1] as a percent with one decimal."""
    n = number(value)
    return DASH if n is None else f"{100 * n:.1f}%"


def fmt_num(value: Any) -> str:
    """Any other number, 3 significant digits."""
    n = number(value)
    return DASH if n is None else f"{n:.3g}"


def seconds(value: Any) -> str:
    """Seconds with their unit, or a dash."""
    text = fmt_num(value)
    return text if text == DASH else text + " s"


def plain(value: Any) -> str:
    """A value as text; null or empty as a dash."""
    return DASH if value is None or value == "" else str(value)


def to_json(value: Any) -> str:
    """Pretty-printed JSON; anything not JSON as its text."""
    return json.dumps(value, indent=2, sort_keys=False, default=str)
