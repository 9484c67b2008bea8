"""YAML read as OPA's `yaml.unmarshal` reads it, for the embedded engine.

OPA converts YAML to JSON with sigs.k8s.io/yaml, which resolves plain scalars by go-yaml v2's
rules (YAML 1.1 flavoured): `y`, `yes`, `on` (any case form go-yaml knows) are `true`, `n`,
`no`, `off` are `false`, integers are read as Go's `strconv.ParseInt(s, 0, 64)` reads them after
dropping `_` (so `017` and `0o17` are octal, `0b101` binary), timestamps and `1:20` stay strings,
and map keys become strings. regorus reads YAML 1.2, where most of those are strings: a policy
would be answered differently, silently. The differential suite
(tests/test_rego_differential.py) pins this against OPA's own engine.
"""

from __future__ import annotations

import math
import re
import struct
from decimal import Decimal
from typing import Any

import yaml

MAX_YAML_BYTES = 2**20
_TRUE = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}
_FALSE = {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}
_NULL = {"", "~", "null", "Null", "NULL"}
_INT = re.compile(r"[-+]?(?:0[bB][01]+|0[oO]?[0-7]+|0[xX][0-9a-fA-F]+|0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")
_NUMBER_STARTS = frozenset("+-0123456789")
_SPECIAL_FLOAT = re.compile(r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_INT64 = 2**63


class _GoYamlLoader(yaml.SafeLoader):
    """Plain scalars stay strings here; `_resolve` applies go-yaml's rules afterwards (PyYAML's
    own resolvers are YAML 1.1 but differ from go-yaml's on `y`/`n`, `017`, `1:20`, dates)."""


_GoYamlLoader.yaml_implicit_resolvers = {}


def unmarshal(text: Any) -> Any:
    if not isinstance(text, str):
        raise ValueError("yaml.unmarshal: operand must be a string")
    if len(text) > MAX_YAML_BYTES:
        raise ValueError(f"yaml.unmarshal: document larger than {MAX_YAML_BYTES // 1024} KiB")
    try:
        node = next(iter(yaml.compose_all(text, Loader=_GoYamlLoader)), None)  # the first only
    except yaml.YAMLError as exc:
        raise ValueError(f"yaml.unmarshal: {exc}") from None
    return None if node is None else _item(node, 0)


def _value(node: yaml.Node, depth: int) -> Any:
    if depth > 256:
        raise ValueError("yaml.unmarshal: document nested too deeply")
    if isinstance(node, yaml.MappingNode):
        return {_key(_value(k, depth + 1)): _item(v, depth + 1) for k, v in _pairs(node)}
    if isinstance(node, yaml.SequenceNode):
        return [_item(item, depth + 1) for item in node.value]
    assert isinstance(node, yaml.ScalarNode)
    if node.style is not None:
        return node.value  # quoted or block scalars are strings
    return _resolve(node.value)


def _item(node: yaml.Node, depth: int) -> Any:
    return _json_value(_value(node, depth))


def _pairs(node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
    """Key/value nodes, `<<` merge keys expanded as go-yaml expands them (later keys win)."""
    pairs: list[tuple[yaml.Node, yaml.Node]] = []
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "<<" and key.style is None:
            merged = value.value if isinstance(value, yaml.SequenceNode) else [value]
            for source in merged:
                if isinstance(source, yaml.MappingNode):
                    pairs.extend(_pairs(source))
            continue
        pairs.append((key, value))
    return pairs


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        raise ValueError("yaml.unmarshal: unsupported map key of type null")
    if isinstance(key, int | float):
        return _number_text(key)
    raise ValueError("yaml.unmarshal: a map key must be a scalar")


def _number_text(number: float) -> str:
    """A number as a map key's text: sigs.k8s.io/yaml writes a float key as Go's
    `strconv.FormatFloat(f, 'g', -1, 32)`: float32's shortest digits, exponent form below 1e-4
    and from 1e6 (`1e+07`), `.inf` past float32's range."""
    if isinstance(number, int):
        return str(number)
    if math.isnan(number):
        return ".nan"
    if number == 0:
        return "0"
    digits = _float32_digits(number)
    if digits is None:
        return ".inf" if number > 0 else "-.inf"
    sign, figures, exponent = digits.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, figures))
    point = len(text) + exponent - 1  # the decimal exponent of the first digit
    if point < -4 or point >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        body = f"{mantissa}e{'-' if point < 0 else '+'}{abs(point):02d}"
    else:
        body = format(digits.copy_abs(), "f")
    return ("-" if sign else "") + body


def _float32_digits(number: float) -> Decimal | None:
    """The shortest decimal that reads back as the same float32 (None past its range)."""
    try:
        single = _as_float32(number)
    except OverflowError:
        return None
    if math.isinf(single):
        return None
    for places in range(1, 10):
        candidate = f"{single:.{places - 1}e}"
        if _as_float32(float(candidate)) == single:
            return Decimal(candidate).normalize()
    return Decimal(repr(single)).normalize()


def _as_float32(number: float) -> float:
    value: float = struct.unpack("f", struct.pack("f", number))[0]
    return value


def _resolve(plain: str) -> Any:
    """go-yaml v2's `resolve` for a plain scalar: its table of words, then numbers only for
    text starting with a digit, a sign or a dot."""
    if plain in _NULL:
        return None
    if plain in _TRUE:
        return True
    if plain in _FALSE:
        return False
    if _SPECIAL_FLOAT.fullmatch(plain):
        return float(plain.replace(".", "", 1))  # a key's text; an error as a value
    if plain[:1] == ".":
        return float(plain) if _DOT_FLOAT.fullmatch(plain) else plain
    if plain[:1] not in _NUMBER_STARTS:
        return plain
    digits = plain.replace("_", "")
    if _INT.fullmatch(digits):
        number = _go_int(digits)
        if -_INT64 <= number < 2 * _INT64:  # int64, else uint64
            return number
    if _FLOAT.fullmatch(digits):
        return float(digits)  # a float: `1e7` is the key `1e+07`, the value 10000000
    return plain


def _json_value(value: Any) -> Any:
    """What JSON can hold: OPA fails on an infinite or NaN value (a key's text is fine)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"yaml.unmarshal: json: unsupported value: {_number_text(value)}")
    return value


def _go_int(digits: str) -> int:
    sign = -1 if digits.startswith("-") else 1
    body = digits.lstrip("+-")
    lowered = body.lower()
    if lowered.startswith("0x"):
        return sign * int(body[2:], 16)
    if lowered.startswith("0b"):
        return sign * int(body[2:], 2)
    if lowered.startswith("0o"):
        return sign * int(body[2:], 8)
    if len(body) > 1 and body.startswith("0"):
        return sign * int(body[1:], 8)
    return sign * int(body)

