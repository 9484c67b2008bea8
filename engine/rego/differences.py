"""Load-time warnings for Rego the embedded engine evaluates differently from OPA, silently.

The differences that would give a silently different answer and can be refused are refused at
load (`engine.rego.embedded`: `http.send`, `yaml.marshal`). Decimal arithmetic cannot be
refused (most policies that touch prices use it correctly, with a margin), but a module that
computes with a non-integer literal (`cost * 1.1`, `0.1 + 0.2`) or compares one for equality
(`x == 0.3`) may get another answer than OPA's in the last digits (regorus: binary floating
point; OPA: decimal): such a line is warned about, once per line, naming file and line. So is
an integer literal past the 64-bit range (regorus holds it in floating point, OPA exactly). A
difference hidden behind variables (`a * b` where both come from the input) is not detectable
here; docs/rego.md lists it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from engine.rego.common import RegoModule, strip_comments

log = logging.getLogger("gpuwarden.rego")
MAX_WARNINGS_PER_MODULE = 5
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`')
_DECIMAL = r"(?<![\w.])\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])"
_OPERATOR = r"(?:[-+*/%]|[=!]=)"
_DECIMAL_ARITHMETIC = re.compile(
    rf"{_DECIMAL}\s*{_OPERATOR}\s*[\w(\[]|[\w)\]]\s*{_OPERATOR}\s*{_DECIMAL}")
_INTEGER = re.compile(r"(?<![\w.])\d{19,}(?![\w.])")
INT64_LIMIT = 2**63
BIG_INTEGER_WARNING = ("an integer literal past the 64-bit range: the embedded engine computes "
                       "it in floating point, OPA exactly (a comparison with it can differ; an "
                       "answer holding one is refused); use evaluator: remote")
DECIMAL_WARNING = ("decimal arithmetic: the embedded engine computes non-integers in binary "
                   "floating point, OPA in decimal (0.1 + 0.2 == 0.3 is false embedded, true in "
                   "OPA); compare with a margin or round, or use evaluator: remote")


def decimal_arithmetic_lines(module: RegoModule) -> list[int]:
    """Lines of `module` that compute with, or compare for equality, a non-integer literal."""
    text = _STRING.sub('""', strip_comments(module.text))
    return [number for number, line in enumerate(text.splitlines(), start=1)
            if _DECIMAL_ARITHMETIC.search(line)]


def big_integer_lines(module: RegoModule) -> list[int]:
    """Lines of `module` holding an integer literal past the 64-bit range."""
    text = _STRING.sub('""', strip_comments(module.text))
    return [number for number, line in enumerate(text.splitlines(), start=1)
            if any(int(found) >= INT64_LIMIT for found in _INTEGER.findall(line))]


def warn_known_differences(modules: Sequence[RegoModule], policy_id: str) -> list[str]:
    """Log (and return) one warning per line whose answer may differ from OPA's."""
    warnings = []
    for module in modules:
        found = [(line, DECIMAL_WARNING) for line in decimal_arithmetic_lines(module)]
        found += [(line, BIG_INTEGER_WARNING) for line in big_integer_lines(module)]
        for line, why in sorted(found)[:MAX_WARNINGS_PER_MODULE]:
            warnings.append(f"{module.shown}:{line}: warning: policy {policy_id}: {why}")
    for warning in warnings:
        log.warning("%s", warning)
    return warnings
