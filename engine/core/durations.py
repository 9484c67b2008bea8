"""Durations in policy parameters and messages: `90m`, `1h30m`, `2d` ↔ seconds.

Pure helpers of the core; telemetry reads its look-back windows with them too.
"""

from __future__ import annotations

import math
import re
from typing import Any

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: Any) -> int:
    """Seconds in a duration: a number of seconds, or Prometheus-style text (`1h`, `90m`,
    `1h30m`, `2d`). Raises ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"not a duration: {value!r}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"not a duration: {value!r}")
    text = value.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30m, 1h, 1h30m, 2d)")
    return int(sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts))


def format_duration(seconds: int) -> str:
    """`3600` → `1h`, `5400` → `1h30m`, `0` → `0s`."""
    if seconds <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
