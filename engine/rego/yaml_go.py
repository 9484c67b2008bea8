"""YAML read as OPA's `yaml.unmarshal` reads it (and `glob.quote_meta`), for the embedded engine.

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
from typing import Any

import yaml

MAX_YAML_BYTES = 2**20
_TRUE = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}
_FALSE = {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}
_NULL = {"", "~", "null", "Null", "NULL"}
_INT = re.compile(r"[-+]?(?:0[bB][01]+|0[oO]?[0-7]+|0[xX][0-9a-fA-F]+|0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
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
    return None if node is None else _value(node, 0)


def _value(node: yaml.Node, depth: int) -> Any:
    if depth > 256:
        raise ValueError("yaml.unmarshal: document nested too deeply")
    if isinstance(node, yaml.MappingNode):
        return {_key(_value(k, depth + 1)): _value(v, depth + 1) for k, v in _pairs(node)}
    if isinstance(node, yaml.SequenceNode):
        return [_value(item, depth + 1) for item in node.value]
    assert isinstance(node, yaml.ScalarNode)
    if node.style is not None:
        return node.value  # quoted or block scalars are strings
    return _resolve(node.value)


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
    if isinstance(number, int) or (number.is_integer() and abs(number) < 1e21):
        return str(int(number))
    return repr(number)


def _resolve(plain: str) -> Any:
    if plain in _NULL:
        return None
    if plain in _TRUE:
        return True
    if plain in _FALSE:
        return False
    digits = plain.replace("_", "")
    if _INT.fullmatch(digits):
        number = _go_int(digits)
        if -_INT64 <= number < _INT64:
            return number
    if _SPECIAL_FLOAT.fullmatch(plain):
        raise ValueError("yaml.unmarshal: json: unsupported value: " + plain.lstrip("+-."))
    if _FLOAT.fullmatch(digits) and any(c.isdigit() for c in digits):
        value = float(digits)
        if math.isinf(value):
            raise ValueError("yaml.unmarshal: json: unsupported value: +Inf")
        return int(value) if value.is_integer() and abs(value) < _INT64 else value
    return plain


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


_GLOB_SPECIALS = frozenset("*?\\[]{}")


def glob_quote_meta(pattern: Any) -> str:
    """OPA's `glob.quote_meta`: every glob special character escaped (regorus leaves `?`)."""
    if not isinstance(pattern, str):
        raise ValueError("glob.quote_meta: operand must be a string")
    return "".join("\\" + c if c in _GLOB_SPECIALS else c for c in pattern)
