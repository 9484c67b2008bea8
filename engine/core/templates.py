"""Message templates written in policy files: jinja2, sandboxed and bounded.

Policy files come from pull requests, ConfigMaps and S3 buckets, so a `message:` template is
hostile input. It is checked when the policy loads, then rendered per finding under limits:

- **Sandbox.** jinja2's `ImmutableSandboxedEnvironment`: no underscore attributes, no internal
  attributes of functions, frames or generators, no mutation of lists and dicts.
- **Checked at load** (`compile_message`), so `policies validate` refuses what could never be
  safe, naming the line: only output, `if`, `for` (not `recursive`) and `set`; attributes and
  item keys not starting with `_` (nor `mro`); filters from `FILTERS`; calls only to the
  globals in `GLOBALS` and to the read-only methods in `METHODS`; at most `MAX_SOURCE` characters
  and `MAX_NESTING` levels of nested expressions.
- **Bounded at render** (`MessageTemplate.render`): `range` yields at most `MAX_RANGE` numbers;
  every `for` loop counts its iterations against `MAX_STEPS` per render and checks the clock
  against `RENDER_BUDGET_S`; `*` may not build a string or list longer than `MAX_SEQUENCE`, `**`
  may not build a number of more than `MAX_POWER_BITS` bits, and `%` on strings (printf-style
  widths) is refused; the output is cut at `MAX_OUTPUT` characters. Without recursion (no
  macros) loops are the only way a template repeats work, so these bound both time and memory.
- **A render that fails** (a limit, a sandbox refusal, a division by zero) gives the policy's
  title with the reason instead of the message; it never stops the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from enum import Enum
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel

from engine.core import template_memo
from engine.core.bounded import remember
from engine.core.template_memo import MessageMemo, memo_for

MAX_SOURCE = 10_000  # characters of one template
MAX_NESTING = 40  # nested expression levels (the parser recurses)
MAX_OUTPUT = 4_000  # characters of one rendered message
MAX_RANGE = 1_000  # numbers from range()
MAX_STEPS = 10_000  # loop iterations per render, all loops together
MAX_SEQUENCE = 10_000  # items (characters) a `*` may build
MAX_POWER_BITS = 4_096
RENDER_BUDGET_S = 0.25  # wall clock per render, checked on loop iterations and calls
_CLOCK_EVERY = 64  # loop iterations between clock readings

FILTERS = frozenset({
    "abs", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "reverse", "round", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "truncate", "unique", "upper", "usd", "wordcount",
})
METHODS = frozenset({
    "get", "items", "keys", "values", "lower", "upper", "title", "capitalize", "strip",
    "lstrip", "rstrip", "startswith", "endswith", "split", "join", "count",
})
_FORBIDDEN_NAMES = frozenset({"mro"})
_STATEMENTS = (nodes.Output, nodes.If, nodes.For, nodes.Assign)
_EXPRESSIONS = (
    nodes.TemplateData, nodes.Const, nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Slice,
    nodes.Filter, nodes.Test, nodes.Call, nodes.Keyword, nodes.CondExpr, nodes.BinExpr,
    nodes.UnaryExpr, nodes.Compare, nodes.Operand, nodes.Concat, nodes.List, nodes.Tuple,
    nodes.Dict, nodes.Pair,
)
_LOOP_FILTER = "gpuwarden_bounded_loop"
_SAFE_ATTRIBUTES: dict[tuple[type, str], bool] = {}
_MAX_REMEMBERED = 4096
# How `a.b` reads `b` of a type: a data field (a pydantic model's field, an enum's value or
# name), a dict's key (the name is no dict attribute), or jinja's sandboxed lookup.
_FIELD, _ITEM, _SANDBOXED = "field", "item", "sandboxed"
_MAX_KINDS = 64  # types remembered per attribute name
_MISSING = object()


class TemplateRejected(Exception):
    """A template refused at load: `message` says why, `lineno` is its line in the template."""

    def __init__(self, message: str, lineno: int | None = None):
        super().__init__(message)
        self.message = message
        self.lineno = lineno


class TemplateLimit(SecurityError):
    """A render that went over one of the limits."""


# ---------------------------------------------------------------------------- render budget


class _Budget:
    __slots__ = ("deadline", "steps")

    def __init__(self) -> None:
        self.deadline = time.monotonic() + RENDER_BUDGET_S
        self.steps = MAX_STEPS

    def step(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise TemplateLimit(f"loops ran more than {MAX_STEPS} iterations")
        if self.steps % _CLOCK_EVERY == 0:
            self.check_clock()

    def check_clock(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimit(f"rendering took longer than {RENDER_BUDGET_S:g} s")


_CURRENT: ContextVar[_Budget | None] = ContextVar("gpuwarden_template_budget", default=None)


def _budget() -> _Budget:
    budget = _CURRENT.get()
    return _Budget() if budget is None else budget  # None: jinja's own render API


def _bounded_loop(iterable: Iterable[Any]) -> Iterator[Any]:
    budget = _budget()
    for item in iterable:
        budget.step()
        yield item


def _bounded_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise TemplateLimit(f"range() of more than {MAX_RANGE} numbers")
    return numbers


def _usd(value: Any) -> str:
    return f"${float(value or 0):,.0f}"


# ---------------------------------------------------------------------------- environment


class _MessageEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # `attribute_reader`'s readers by name: each reads through this environment
        self._readers: dict[str, Callable[[Any], Any]] = {}

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        """jinja2's answer depends only on the object's type and the name (internal attributes
        of functions, frames...; methods that mutate), so it is remembered per pair: asked
        afresh it is most of a message's rendering time."""
        key = (type(obj), attr)
        safe = _SAFE_ATTRIBUTES.get(key)
        if safe is None:
            safe = remember(_SAFE_ATTRIBUTES, key, attr not in _FORBIDDEN_NAMES
                            and super().is_safe_attribute(obj, attr, value), _MAX_REMEMBERED)
        return safe

    def getattr(self, obj: Any, attribute: str) -> Any:
        """jinja2's sandboxed `obj.attribute`, answered without its checks where the type
        says what the answer is (`attribute_reader`)."""
        return self.attribute_reader(attribute)(obj)

    def attribute_reader(self, attribute: str) -> Callable[[Any], Any]:
        """`getattr(obj, attribute)` for one name, remembered per name: the one path every
        `obj.attribute` of a message takes, in a render and in the message memo's keys."""
        reader = self._readers.get(attribute)
        if reader is None:
            reader = remember(self._readers, attribute, _attribute_reader(self, attribute),
                              _MAX_REMEMBERED)
        return reader

    def call(__self, __context: jinja2.runtime.Context, __obj: Any,
             *args: Any, **kwargs: Any) -> Any:
        _budget().check_clock()
        if not __self._allowed_callable(__obj):
            raise SecurityError(f"{__obj!r} is not callable in a message template")
        return super().call(__context, __obj, *args, **kwargs)

    def _allowed_callable(self, obj: Any) -> bool:
        if obj is _bounded_range or obj is dict:
            return True
        owner = getattr(obj, "__self__", None)
        return (getattr(obj, "__name__", None) in METHODS
                and isinstance(owner, str | dict | list | tuple))

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any,
                   right: Any) -> Any:
        if operator == "%" and isinstance(left, str):
            raise SecurityError("'%' formatting of strings is not allowed; use ~ and filters")
        if operator == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
        if operator == "**":
            _check_power(left, right)
        return super().call_binop(context, operator, left, right)


def _attribute_reader(env: _MessageEnvironment, attribute: str) -> Callable[[Any], Any]:
    """Reads `attribute` of an object without jinja2's checks where the object's type says
    what the answer is: the field of a model (data, never a method) or the key of a dict. Per
    finding a message reads a dozen such attributes; anything else, and a field holding
    something callable, takes jinja2's path. What a type means is decided once per type."""
    kinds: dict[type, str] = {}

    def read(obj: Any) -> Any:
        kind = kinds.get(type(obj)) or _remember_kind(kinds, obj, attribute)
        if kind is _FIELD:
            value = getattr(obj, attribute)
            if not callable(value):
                return value
        elif kind is _ITEM:  # a dict without the key: no exception raised to say so
            value = obj.get(attribute, _MISSING)
            return value if value is not _MISSING else env.undefined(obj=obj, name=attribute)
        return ImmutableSandboxedEnvironment.getattr(env, obj, attribute)

    return read


def _is_data_field(obj: Any, attribute: str) -> bool:
    if isinstance(obj, BaseModel):
        return attribute in type(obj).model_fields
    return isinstance(obj, Enum) and attribute in ("value", "name")


def _remember_kind(kinds: dict[type, str], obj: Any, attribute: str) -> str:
    """What reading the name of such an object means, remembered in `kinds` by its type."""
    kind = _SANDBOXED
    if attribute.startswith("_") or attribute in _FORBIDDEN_NAMES:
        pass
    elif _is_data_field(obj, attribute):
        kind = _FIELD
    elif type(obj) is dict and not hasattr(dict, attribute):
        kind = _ITEM
    return remember(kinds, type(obj), kind, _MAX_KINDS)


def _check_repeat(sequence: Any, times: Any) -> None:
    if (isinstance(sequence, str | list | tuple) and isinstance(times, int)
            and len(sequence) * times > MAX_SEQUENCE):
        raise TemplateLimit(f"'*' would build more than {MAX_SEQUENCE} items")


def _check_power(base: Any, exponent: Any) -> None:
    if not isinstance(base, int | float) or not isinstance(exponent, int | float):
        return
    bits = max(abs(int(base)), 2).bit_length() * abs(exponent)
    if abs(base) > 1 and bits > MAX_POWER_BITS:
        raise TemplateLimit(f"'**' would build a number of more than {MAX_POWER_BITS} bits")


def _environment() -> _MessageEnvironment:
    env = _MessageEnvironment(undefined=jinja2.ChainableUndefined, autoescape=False)
    env.filters = {name: env.filters[name] for name in FILTERS if name in env.filters}
    env.filters["usd"] = _usd
    env.filters[_LOOP_FILTER] = _bounded_loop
    env.globals = {"range": _bounded_range, "dict": dict}
    return env


ENVIRONMENT = _environment()


# ---------------------------------------------------------------------------- load-time checks


def _reject(node: nodes.Node, why: str) -> TemplateRejected:
    return TemplateRejected(why, getattr(node, "lineno", None))


def _check_name(node: nodes.Node, name: Any) -> None:
    if isinstance(name, str) and (name.startswith("_") or name in _FORBIDDEN_NAMES):
        raise _reject(node, f"access to {name!r} is not allowed")


def _check_call(node: nodes.Call) -> None:
    callee = node.node
    if isinstance(callee, nodes.Name) and callee.name in ENVIRONMENT.globals:
        return
    if isinstance(callee, nodes.Getattr) and callee.attr in METHODS:
        return
    shown = callee.name if isinstance(callee, nodes.Name) else getattr(callee, "attr", "this")
    raise _reject(node, f"calling {shown!r} is not allowed (globals: "
                  f"{', '.join(sorted(ENVIRONMENT.globals))}; methods: "
                  f"{', '.join(sorted(METHODS))})")


def _check_node(node: nodes.Node) -> None:
    if not isinstance(node, _STATEMENTS + _EXPRESSIONS):
        raise _reject(node, f"{type(node).__name__.lower()} is not allowed in a message "
                      "template (output, if, for and set only)")
    if isinstance(node, nodes.For) and node.recursive:
        raise _reject(node, "recursive loops are not allowed")
    if isinstance(node, nodes.Assign) and not isinstance(node.target, nodes.Name | nodes.Tuple):
        raise _reject(node, "only plain names can be set")
    if isinstance(node, nodes.Name):
        _check_name(node, node.name)
    elif isinstance(node, nodes.Getattr):
        _check_name(node, node.attr)
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        _check_name(node, node.arg.value)
    elif isinstance(node, nodes.Keyword) and isinstance(node.value, nodes.Const):
        _check_name(node, node.value.value)
    elif isinstance(node, nodes.Filter | nodes.Call) and (node.dyn_args or node.dyn_kwargs):
        raise _reject(node, "*args and **kwargs are not allowed")
    if isinstance(node, nodes.Filter) and node.name not in FILTERS:
        raise _reject(node, f"filter {node.name!r} is not allowed (allowed: "
                      f"{', '.join(sorted(FILTERS))})")
    if isinstance(node, nodes.Call):
        _check_call(node)


def _check_tree(template: nodes.Template) -> None:
    """Every node of the template, and nesting no deeper than `MAX_NESTING` (iteratively:
    the check must not recurse on what it is guarding against)."""
    pending: list[tuple[nodes.Node, int]] = [(child, 1) for child in template.body]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_NESTING:
            raise _reject(node, f"nested more than {MAX_NESTING} levels deep")
        _check_node(node)
        pending.extend((child, depth + 1) for child in node.iter_child_nodes())


def _bound_loops(template: nodes.Template) -> None:
    """Route every `for` loop's iterable through the step-counting filter."""
    for loop in template.find_all(nodes.For):
        loop.iter = nodes.Filter(loop.iter, _LOOP_FILTER, [], [], None, None,
                                 lineno=loop.lineno)


def _parse(source: str) -> nodes.Template:
    if len(source) > MAX_SOURCE:
        raise TemplateRejected(f"longer than {MAX_SOURCE} characters")
    if _bracket_depth(source) > MAX_NESTING:
        raise TemplateRejected(f"nested more than {MAX_NESTING} levels deep")
    try:
        return ENVIRONMENT.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateRejected(exc.message or "syntax error", exc.lineno) from None
    except ValueError as exc:  # an integer literal beyond Python's int-str limit
        raise TemplateRejected(f"invalid literal: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise TemplateRejected(f"nested more than {MAX_NESTING} levels deep") from None


def _bracket_depth(source: str) -> int:
    depth = deepest = 0
    for char in source:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth = max(depth - 1, 0)
    return deepest


class MessageTemplate:
    """A checked, compiled message template; `render` applies the render-time limits."""

    def __init__(self, source: str, template: jinja2.Template, *, budgeted: bool = True,
                 memo: MessageMemo | None = None):
        self.source = source
        self.template = template
        # Only loops and calls read the render budget: a template without them needs none.
        self.budgeted = budgeted
        self.memo = memo  # texts by the values they read (`engine.core.template_memo`)

    def render(self, values: Mapping[str, Any], *, fallback: str) -> str:
        """The message with whitespace collapsed; `fallback (message template failed: why)`
        when rendering fails. Rendered once per distinct set of the values it reads, where
        the memo can key them."""
        memo = self.memo
        key = None if memo is None else memo.key(values)
        if memo is None or key is None:
            return self._render(values, fallback)
        remembered = memo.texts.get(key)
        if remembered is None:
            text = self._marked_text(memo, values)
            if text is None:
                return self._render(values, fallback)
            remembered = memo.remember(key, text)
        quick = memo.collapsed_text(remembered, values, MAX_OUTPUT)
        return quick if quick is not None else _finished(memo.named_text(remembered.raw, values))

    def _render(self, values: Mapping[str, Any], fallback: str) -> str:
        """A shared context skips copying the template globals per finding, which halves
        rendering time on large reports."""
        token = _CURRENT.set(_Budget()) if self.budgeted else None
        try:
            context = self.template.new_context({**ENVIRONMENT.globals, **values}, shared=True)
            return " ".join(_bounded_output(self.template.root_render_func(context)).split())
        except Exception as exc:  # a hostile template may raise anything
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
            return f"{fallback} (message template failed: {why})"
        finally:
            if token is not None:
                _CURRENT.reset(token)

    def _marked_text(self, memo: MessageMemo, values: Mapping[str, Any]) -> str | None:
        """The whole output with markers for names, before whitespace is collapsed; None when
        it fails or is long (then it is rendered the usual way and not remembered)."""
        try:
            context = self.template.new_context({**ENVIRONMENT.globals, **memo.marked(values)},
                                                shared=True)
            text = _bounded_output(self.template.root_render_func(context))
        except Exception:  # a hostile template may raise anything: rendered as usual
            return None
        return text if len(text) <= template_memo.MAX_TEXT else None


def _finished(text: str) -> str:
    """What `_bounded_output` and the whitespace collapse make of a whole output."""
    if len(text) > MAX_OUTPUT:
        text = text[: MAX_OUTPUT - 1] + "…"
    return " ".join(text.split())


def _bounded_output(chunks: Iterable[str]) -> str:
    parts: list[str] = []
    size = 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size > MAX_OUTPUT:
            return "".join(parts)[: MAX_OUTPUT - 1] + "…"
    return "".join(parts)


def compile_message(source: str) -> MessageTemplate:
    """Parse, check and compile a message template; `TemplateRejected` says what is wrong."""
    tree = _parse(source)
    _check_tree(tree)
    _bound_loops(tree)
    try:
        code = ENVIRONMENT.compile(tree)
    except jinja2.TemplateError as exc:
        raise TemplateRejected(exc.message or type(exc).__name__,
                               getattr(exc, "lineno", None)) from None
    except RecursionError:
        raise TemplateRejected(f"nested more than {MAX_NESTING} levels deep") from None
    template = ENVIRONMENT.template_class.from_code(ENVIRONMENT, code, ENVIRONMENT.globals)
    budgeted = any(True for _ in tree.find_all((nodes.For, nodes.Call)))
    return MessageTemplate(source, template, budgeted=budgeted, memo=memo_for(tree, ENVIRONMENT))
