"""Kubernetes resource quantities (`2`, `"500m"`, `"1Gi"`, `"1e3"`) as numbers, GPU device
counts, and the GPU memory a workload declares in its `gpuwarden.io/gpu-memory` annotation.
"""

from __future__ import annotations

import math
import re
from typing import Any

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "m": 1e-3,
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
_QUANTITY = re.compile(
    r"^\+?(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|([KMGTPE]i|[mkMGTPE])?)$", re.ASCII
)
_MEMORY = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMGT]i?)B?)?$", re.IGNORECASE | re.ASCII)


def gpu_quantity(value: Any) -> float | None:
    """A whole, non-negative device count from a Kubernetes quantity; None when malformed."""
    amount = parse_quantity(value)
    if amount is None or amount < 0 or not amount.is_integer():
        return None
    return amount


def parse_quantity(value: Any) -> float | None:
    """A Kubernetes resource quantity (`1`, `"2"`, `"500m"`, `"1Gi"`, `"1e3"`) as a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    if not isinstance(value, str):
        return None
    found = _QUANTITY.match(value.strip())
    if found is None:
        return None
    digits, exponent, suffix = found.groups()
    number = float(digits + (exponent or ""))
    if suffix in _BINARY_SUFFIXES:
        number *= _BINARY_SUFFIXES[suffix]
    else:
        number *= _DECIMAL_SUFFIXES[suffix or ""]
    return number if math.isfinite(number) else None


def declared_memory_gib(value: Any) -> tuple[float | None, bool]:
    """GiB from the `gpuwarden.io/gpu-memory` annotation: (value, known).

    `12Gi`/`12GiB` are GiB, `12G`/`12GB` are 10^9 bytes, `12000Mi` MiB; a bare number is GiB.
    """
    if value is None:
        return None, True
    found = _MEMORY.match(value.strip()) if isinstance(value, str) else None
    if found is None:
        return None, False
    number, unit = float(found.group(1)), (found.group(2) or "").upper()
    if not unit:
        gib = number
    elif unit.endswith("I"):
        gib = number * 1024.0 ** ("KMGT".index(unit[0]) - 2)
    else:
        gib = number * 1000.0 ** ("KMGT".index(unit[0]) + 1) / 2**30
    if not math.isfinite(gib) or gib <= 0:
        return None, False
    return gib, True
