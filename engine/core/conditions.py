"""The condition language: value filters over resource fields, all/any/not, and registered checks.

A condition compiles once into a `Condition` whose `test(resource, ctx)` answers True (holds),
False (does not) or None (depends on a value not known yet). Everything that can be checked
before evaluation is checked here: operators, regexes, value types, parameter names.

Condition forms (YAML):

    {field: gpu.count, op: gt, value: 0}       # value filter (Cloud Custodian's operators)
    {field: tags.team, op: absent}
    {field: capacity, op: ne, param: wanted}   # compare with a policy parameter
    {all: [...]} / {any: [...]} / {not: {...}}
    {production: false}                        # a registered check (see engine.core.checks)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr
from pydantic import BaseModel

from engine.core.catalog import Catalog
from engine.core.check_args import CheckArgs
from engine.core.model import Resource
from engine.core.tristate import Tri, negate
from engine.core.yamltext import line_of


class PolicySyntaxError(Exception):
    """A condition that cannot compile; `line` points into the policy file when known."""

    def __init__(self, message: str, node: Any = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line if line is not None else line_of(node)


@dataclass(frozen=True, slots=True)
class EvalContext:
    """What evaluation may depend on besides the resource: the clock and the catalog."""

    now: datetime
    catalog: Catalog


# Compiled, the condition classes are native classes: those a test or an extension defines in
# plain Python must be allowed to subclass them.
@mypyc_attr(allow_interpreted_subclasses=True)
class Condition:
    """A compiled condition."""

    # True where `evidence` says something only when `test` answers None (not known): then a
    # condition that held has nothing to add to a finding.
    evidence_only_when_unknown: ClassVar[bool] = False

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        raise NotImplementedError

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        """Facts worth showing in a finding (called only for failing / unknown resources)."""
        return {}

    def children(self) -> tuple[Condition, ...]:
        return ()


@mypyc_attr(allow_interpreted_subclasses=True)
class Check(Condition):
    """A registered condition type: `{<key>: <args>}` in YAML. Subclass and `register_check`."""

    key: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[CheckArgs]] = CheckArgs
    # Name of the single field that a scalar shorthand `{key: value}` fills.
    shorthand: ClassVar[str | None] = None

    def __init__(self, args: Any, params: Mapping[str, Any]):
        self.args = args
        self.params = params

    @classmethod
    def file_parameters(cls, args: Any) -> Mapping[str, str]:
        """The policy parameters this check reads as files, each with the kind of file
        (`{"budgets_file": "budgets"}`). The loading layer reads them before compilation and
        compiles the check with their parsed content in their place: the core does no I/O."""
        return {}


CHECKS: dict[str, type[Check]] = {}


def param_value(params: Mapping[str, Any], name: str | None, fallback: Any = None) -> Any:
    """The policy parameter a check's argument names; `fallback` when it names none."""
    if name is None:
        return fallback
    if name not in params:
        raise KeyError(f"unknown parameter {name!r}")
    return params[name]


def register_check(cls: type[Check]) -> type[Check]:
    CHECKS[cls.key] = cls
    return cls


# --- value filter -----------------------------------------------------------------------------

_MISSING = object()
_OP_ALIASES = {
    "equal": "eq",
    "not-equal": "ne",
    "greater-than": "gt",
    "gte": "ge",
    "less-than": "lt",
    "lte": "le",
    "ni": "not-in",
}
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
}
OPERATORS = (
    "eq", "ne", "in", "not-in", "gt", "ge", "lt", "le", "regex", "glob",
    "contains", "present", "absent", "empty",
)
_UNARY = {"present", "absent", "empty"}
_FIELD_OPS = frozenset({"eq", "ne", "in", "not-in"})


_UNKNOWN = object()


def _plain(value: Any) -> Any:
    """Enum fields compare by their string value; their `unknown` member means not known."""
    if isinstance(value, Enum):
        plain = value._value_  # `.value` is a descriptor, several times slower per read
        return _UNKNOWN if plain == "unknown" else plain
    return value


def _check_model_path(parts: list[str]) -> None:
    """Reject paths that name no field: `gpu.cnt` must fail at load, not never match."""
    model: type[BaseModel] | None = Resource
    for index, part in enumerate(parts):
        if model is None:
            return  # inside a dict (tags, annotations, ...): any key is fine
        fields = model.model_fields
        if part not in fields:
            where = ".".join(parts[:index]) or "resource"
            raise PolicySyntaxError(
                f"unknown field {'.'.join(parts[: index + 1])!r} ({where} fields: "
                f"{', '.join(sorted(fields))})"
            )
        annotation = fields[part].annotation
        model = next((arg for arg in getattr(annotation, "__args__", (annotation,))
                      if isinstance(arg, type) and issubclass(arg, BaseModel)), None)
        if model is None and index + 1 < len(parts) and not _is_mapping(annotation):
            raise PolicySyntaxError(f"field {part!r} has no sub-fields")


def _enum_of(name: str) -> type[Enum] | None:
    """The enum type of a field of the resource, if that is its type."""
    field = Resource.model_fields.get(name)
    annotation = field.annotation if field is not None else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, Enum) else None


def _is_mapping(annotation: Any) -> bool:
    origin = getattr(annotation, "__origin__", annotation)
    return origin is dict or (isinstance(origin, type) and issubclass(origin, Mapping))


def field_getter(path: str) -> Callable[[Resource], Any]:
    """Compile a dotted path into a getter. Model attributes first; once a dict is reached the
    rest of the path is one key (tag keys hold dots: `tags.gpuwarden.io/exempt`); under `raw.`
    each segment is a key."""
    parts = path.split(".")
    if parts[0] == "raw":
        return _raw_getter(parts[1:])
    _check_model_path(parts)
    if len(parts) == 1:  # a field of the resource itself (`capacity`, `state`): most paths
        return _field_getter(parts[0])

    def get(resource: Resource) -> Any:
        value: Any = resource
        for index, key in enumerate(parts):
            if isinstance(value, dict):
                return value.get(".".join(parts[index:]), _MISSING)
            value = getattr(value, key, _MISSING)
            if value is _MISSING or value is None:
                return _MISSING if value is _MISSING else None
        return _plain(value)

    return get


def _field_getter(name: str) -> Callable[[Resource], Any]:
    def get_field(resource: Resource) -> Any:
        value = getattr(resource, name, _MISSING)
        return value if value is _MISSING or value is None else _plain(value)

    return get_field


def _raw_getter(keys: list[str]) -> Callable[[Resource], Any]:
    def get_raw(resource: Resource) -> Any:
        value: Any = resource.raw
        for key in keys:
            if isinstance(value, dict):
                value = value.get(key, _MISSING)
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                return _MISSING
            if value is _MISSING:
                return _MISSING
        return value

    return get_raw


def _matches(op: str, actual: Any, expected: Any, pattern: re.Pattern[str] | None) -> bool:
    if op in _UNARY:
        if op == "present":
            return actual is not _MISSING and actual is not None
        if op == "absent":
            return actual is _MISSING or actual is None
        return actual in (_MISSING, None, "", [], {}, ())
    if actual is _MISSING:
        return op in ("ne", "not-in")
    if op == "eq":
        return bool(actual == expected)
    if op == "ne":
        return bool(actual != expected)
    if op == "in":
        return actual in expected
    if op == "not-in":
        return actual not in expected
    if op == "contains":
        container = isinstance(actual, list | tuple | set | frozenset | dict | str)
        return container and expected in actual
    if pattern is not None:  # regex, glob
        return isinstance(actual, str) and pattern.fullmatch(actual) is not None
    try:
        return _COMPARISONS[op](actual, expected)
    except TypeError:
        return False


class ValueCondition(Condition):
    """`field` `op` `value`: the general filter (`value_condition` picks a faster kind where
    the path and operator allow one)."""

    evidence_only_when_unknown = True

    def __init__(self, path: str, op: str, expected: Any, pattern: re.Pattern[str] | None):
        self.path = path
        self.op = op
        self.expected = expected
        self.pattern = pattern
        self.get = field_getter(path)

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if resource.unknown and resource.is_unknown(self.path):
            return None
        actual = self.get(resource)
        if actual is _UNKNOWN:
            return None
        return _matches(self.op, actual, self.expected, self.pattern)

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if (resource.unknown and resource.is_unknown(self.path)) or self.get(resource) is _UNKNOWN:
            return {"unknown": [self.path]}
        return {}


class FieldCondition(ValueCondition):
    """A field of the resource itself compared by eq/ne/in/not-in (most filters), read inline."""

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if resource.unknown and resource.is_unknown(self.path):
            return None
        return self.answer(getattr(resource, self.path, _MISSING))

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        """The general evidence, for a test that answers None exactly when the field is
        unknown."""
        return {"unknown": [self.path]} if self.test(resource, ctx) is None else {}

    def answer(self, actual: Any) -> Tri:
        """What `test` answers for the field's value."""
        if actual is _MISSING:
            return self.op in ("ne", "not-in")
        if isinstance(actual, Enum):
            actual = actual._value_
            if actual == "unknown":
                return None
        op = self.op
        if op == "in":
            return actual in self.expected
        if op == "not-in":
            return actual not in self.expected
        if op == "eq":
            return bool(actual == self.expected)
        return bool(actual != self.expected)


class EnumFieldCondition(FieldCondition):
    """A `FieldCondition` on an enum field (state, capacity, category): the answer for each
    member, laid out when the policy compiles."""

    def __init__(self, path: str, op: str, expected: Any, enum: type[Enum]):
        super().__init__(path, op, expected, None)
        self.enum = enum
        self.answers = {member: self.answer(member) for member in enum}

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if resource.unknown and resource.is_unknown(self.path):
            return None
        actual = getattr(resource, self.path, _MISSING)
        if type(actual) is self.enum:
            return self.answers[actual]
        return self.answer(actual)  # not a member: assigned without validation


def value_condition(path: str, op: str, expected: Any,
                    pattern: re.Pattern[str] | None) -> ValueCondition:
    """The condition of a value filter, of the fastest kind its path and operator allow."""
    if "." in path or path == "raw" or op not in _FIELD_OPS:
        return ValueCondition(path, op, expected, pattern)
    enum = _enum_of(path)
    if enum is None:
        return FieldCondition(path, op, expected, pattern)
    return EnumFieldCondition(path, op, expected, enum)


def _compile_value(node: Mapping[str, Any], params: Mapping[str, Any]) -> ValueCondition:
    extra = set(node) - {"field", "op", "value", "param"}
    if extra:
        raise PolicySyntaxError(f"unknown key(s) in value condition: {', '.join(sorted(extra))}",
                                node)
    path = node.get("field")
    if not isinstance(path, str) or not path:
        raise PolicySyntaxError("'field' must be a non-empty string", node)
    op = _value_operator(node)
    expected = _expected_value(node, op, params)
    pattern = _value_pattern(node, op, expected)
    try:
        return value_condition(path, op, expected, pattern)
    except PolicySyntaxError as exc:
        raise PolicySyntaxError(exc.message, node) from None


def _value_operator(node: Mapping[str, Any]) -> str:
    """The canonical operator (aliases resolved); `eq` when none is given."""
    raw_op = node.get("op", "eq")
    op = _OP_ALIASES.get(raw_op, raw_op) if isinstance(raw_op, str) else raw_op
    if op not in OPERATORS:
        raise PolicySyntaxError(
            f"unknown operator {raw_op!r} (one of: {', '.join(OPERATORS)})", node
        )
    return str(op)


def _expected_value(node: Mapping[str, Any], op: str, params: Mapping[str, Any]) -> Any:
    """The value to compare with (`value`, or the policy parameter `param` names), checked
    against what the operator needs."""
    if "value" in node and "param" in node:
        raise PolicySyntaxError("give either 'value' or 'param', not both", node)
    if "param" in node:
        if node["param"] not in params:
            raise PolicySyntaxError(f"unknown parameter {node['param']!r}", node)
        expected = params[node["param"]]
    else:
        expected = node.get("value")
    if op not in _UNARY and "value" not in node and "param" not in node:
        raise PolicySyntaxError(f"operator {op!r} needs a 'value' or 'param'", node)
    if op in ("in", "not-in") and not isinstance(expected, list | tuple):
        raise PolicySyntaxError(f"operator {op!r} needs a list value", node)
    if op in _COMPARISONS and not isinstance(expected, int | float | str):
        raise PolicySyntaxError(f"operator {op!r} needs a number or string value", node)
    return expected


def _value_pattern(node: Mapping[str, Any], op: str, expected: Any) -> re.Pattern[str] | None:
    """The compiled pattern of a `regex` or `glob` operator; None for the others."""
    if op not in ("regex", "glob"):
        return None
    if not isinstance(expected, str):
        raise PolicySyntaxError(f"operator {op!r} needs a string pattern", node)
    source = fnmatch.translate(expected) if op == "glob" else expected
    try:
        return re.compile(source)
    except re.error as exc:
        raise PolicySyntaxError(f"invalid regex {expected!r}: {exc}", node) from None


# --- boolean structure ------------------------------------------------------------------------


class AllCondition(Condition):
    def __init__(self, items: list[Condition]):
        self.items = tuple(items)

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        unknown = False
        for item in self.items:
            value = item.test(resource, ctx)
            if value is False:
                return False
            if value is None:
                unknown = True
        return None if unknown else True

    def children(self) -> tuple[Condition, ...]:
        return self.items


class AnyCondition(AllCondition):
    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        unknown = False
        for item in self.items:
            value = item.test(resource, ctx)
            if value is True:
                return True
            if value is None:
                unknown = True
        return None if unknown else False


class NotCondition(Condition):
    def __init__(self, item: Condition):
        self.item = item

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        return negate(self.item.test(resource, ctx))

    def children(self) -> tuple[Condition, ...]:
        return (self.item,)


def compile_condition(node: Any, params: Mapping[str, Any]) -> Condition:
    """Compile a YAML condition node; raises PolicySyntaxError with the node's line."""
    if isinstance(node, list):
        return AllCondition([compile_condition(item, params) for item in node])
    if not isinstance(node, Mapping):
        raise PolicySyntaxError(f"a condition must be a mapping, got {type(node).__name__}", node)
    if "field" in node:
        return _compile_value(node, params)
    if len(node) != 1:
        raise PolicySyntaxError(
            f"a condition has exactly one key, got {', '.join(map(str, node)) or 'none'}", node
        )
    key, value = next(iter(node.items()))
    if key in ("all", "any"):
        if not isinstance(value, list) or not value:
            raise PolicySyntaxError(f"'{key}' needs a non-empty list of conditions", node)
        items = [compile_condition(item, params) for item in value]
        return AllCondition(items) if key == "all" else AnyCondition(items)
    if key == "not":
        return NotCondition(compile_condition(value, params))
    check = CHECKS.get(key)
    if check is None:
        known = ", ".join(["field", "all", "any", "not", *sorted(CHECKS)])
        raise PolicySyntaxError(f"unknown condition {key!r} (one of: {known})", node)
    return _compile_check(check, value, params, node)


def _compile_check(
    check: type[Check], value: Any, params: Mapping[str, Any], node: Any
) -> Check:
    args = _check_args(check, value, node)
    try:
        return check(args, params)
    except (ValueError, KeyError) as exc:
        raise PolicySyntaxError(f"'{check.key}': {exc}", node) from None


def _check_args(check: type[Check], value: Any, node: Any) -> CheckArgs:
    if value is None:
        value = {}
    elif not isinstance(value, Mapping):
        if check.shorthand is None:
            raise PolicySyntaxError(f"'{check.key}' takes a mapping of arguments", node)
        value = {check.shorthand: value}
    try:
        return check.Args.model_validate(dict(value))
    except ValueError as exc:
        first = str(exc).splitlines()
        raise PolicySyntaxError(f"'{check.key}': {' '.join(first[1:3]).strip()}", node) from None


def file_parameters(node: Any) -> dict[str, str]:
    """The parameters that the registered checks of a condition (YAML, not compiled yet) read
    as files, each with its kind. Malformed parts are skipped: compilation reports them."""
    if isinstance(node, list):
        return {name: kind for item in node for name, kind in file_parameters(item).items()}
    if not isinstance(node, Mapping) or len(node) != 1 or "field" in node:
        return {}
    key, value = next(iter(node.items()))
    if key in ("all", "any", "not"):
        return file_parameters(value)
    check = CHECKS.get(key)
    if check is None:
        return {}
    try:
        return dict(check.file_parameters(_check_args(check, value, node)))
    except PolicySyntaxError:
        return {}


def quiet_when_held(condition: Condition) -> bool:
    """Whether a condition that held (True) has no evidence: one whose evidence speaks only of
    unknowns, or an `all:` of such conditions (each of which held)."""
    if type(condition) is AllCondition:
        return all(quiet_when_held(item) for item in condition.items)
    return condition.evidence_only_when_unknown


def walk(condition: Condition) -> list[Condition]:
    found = [condition]
    for child in condition.children():
        found.extend(walk(child))
    return found
