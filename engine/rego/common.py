"""What the Rego evaluators share: modules, the evaluator interface, errors with `file:line`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from engine.core.errors import InputError
from engine.core.model import Door

# The rules a policy package may define, in the order their findings are listed: conftest's
# `deny` / `warn`, Gatekeeper's `violation`, and gpuwarden's `unknown` (undecidable resources).
CONVENTION_RULES = ("deny", "violation", "warn", "unknown")

_PACKAGE = re.compile(r"^[ \t]*package[ \t]+([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)", re.MULTILINE)
_RULE_HEAD = re.compile(
    r"^[ \t]*(?:default[ \t]+)?(" + "|".join(CONVENTION_RULES) + r"|test_\w+)\b"
    r"(?=[ \t]*(?:\[|contains\b|if\b|\{|:=|=|$))",
    re.MULTILINE,
)
_LOCATION = re.compile(r"-->\s*(?P<file>.+?):(?P<line>\d+):(?P<col>\d+)")
_ERROR_LINE = re.compile(r"^\s*error:\s*(?P<message>.+?)\s*$", re.MULTILINE)


class RegoError(InputError):
    """A Rego module that does not parse, names an unknown function, or fails at evaluation."""


class RegoAborted(RegoError):
    """Evaluation stopped by a limit (time, memory) or by a crash of the engine: the policy
    has no verdict for this input, which is not the input's fault."""


class RegoUnavailable(InputError):
    """The evaluator cannot answer at all (an OPA server that is down or too slow)."""


class Undefined:
    """A rule with no value for this input (OPA's `{}` without `result`)."""

    _instance: Undefined | None = None

    def __new__(cls) -> Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"


UNDEFINED = Undefined()


@dataclass(frozen=True)
class RegoModule:
    """One `.rego` file: its text exactly as written, and the name errors show for it."""

    shown: str
    text: str

    @property
    def package(self) -> str | None:
        found = _PACKAGE.search(_without_comments(self.text))
        return found.group(1) if found else None

    def rule_names(self) -> list[str]:
        """Convention and `test_` rules this module defines (a text scan: rule heads start a
        line; a false positive costs one query that comes back undefined)."""
        return list(dict.fromkeys(_RULE_HEAD.findall(_without_comments(self.text))))


class RegoEvaluator(Protocol):
    """Evaluates rules of loaded modules against one input document."""

    def evaluate(self, paths: Sequence[str], input_doc: Any,
                 door: Door = "plan") -> dict[str, Any]:
        """Each of `paths` (`data.pkg.rule`) that is defined for `input_doc`, with its value
        (`door` lets an evaluator pick its client: the webhook's is asynchronous)."""
        ...

    def evaluate_many(self, paths: Sequence[str], inputs: Iterable[Any],
                      door: Door = "plan") -> list[dict[str, Any] | InputError]:
        """`evaluate` for each of `inputs`, in order, in as few calls as the evaluator can:
        per input its values or the error it raised (`RegoAborted`, `RegoError`, and
        `RegoUnavailable` at admission); at the other doors an error that stops the run may be
        raised instead."""
        ...


def _without_comments(text: str) -> str:
    """Rego text with `#` comments blanked (string literals keep their `#`)."""
    out: list[str] = []
    for line in text.splitlines():
        quoted = False
        for index, char in enumerate(line):
            if char == '"' and (index == 0 or line[index - 1] != "\\"):
                quoted = not quoted
            elif char == "#" and not quoted:
                line = line[:index]
                break
        out.append(line)
    return "\n".join(out)


def strip_comments(text: str) -> str:
    return _without_comments(text)


def rego_error(
    exc: BaseException, *, default_file: str, line_shift: Mapping[str, int] | None = None,
    prefix: str = "rego",
) -> RegoError:
    """An engine error (regorus prints `--> file:line:col` then `error: ...`) as one line."""
    text = str(exc)
    text = text.split("Stack backtrace:", 1)[0].split("Caused by:", 1)[0]
    # A compile error wraps the precise one: the last location and message are the innermost.
    locations, messages = list(_LOCATION.finditer(text)), list(_ERROR_LINE.finditer(text))
    found = locations[-1] if locations else None
    message = messages[-1] if messages else None
    what = message.group("message") if message else " ".join(text.split()) or type(exc).__name__
    what = _shorten(explain_gap(what))
    if found is None:
        return RegoError(f"{prefix}: {what}", file=default_file)
    file, line = found.group("file"), int(found.group("line"))
    shift = (line_shift or {}).get(file, 0)
    if shift and line > shift:
        line -= 1
    return RegoError(f"{prefix}: {what} (column {found.group('col')})", file=file, line=line)


_GAPS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"`some \.\. in collection` expects array/set/object\. Got `(?P<got>[^`]*)`"),
        "`some .. in` over {got}: OPA treats iterating a non-collection as undefined, the "
        "embedded engine stops instead; guard the value (is_array(x), object.get(obj, key, [])) "
        "or use evaluator: remote",
    ),
    (
        re.compile(r"could not find function (?P<name>[\w.]+)"),
        "unknown function '{name}': not an OPA built-in, or one the embedded engine (regorus) "
        "does not provide; use evaluator: remote for it",
    ),
    (
        re.compile(r"Unknown function: '(?P<name>[\w.]+)'"),
        "unknown function '{name}': not an OPA built-in, or one the embedded engine (regorus) "
        "does not provide; use evaluator: remote for it",
    ),
)


def _shorten(message: str, limit: int = 240) -> str:
    """Engine messages may dump whole scopes (`var x is unsafe (path [...], scopes [...])`)."""
    message = re.sub(r"\s*\(path \[.*$", "", message)
    return message if len(message) <= limit else message[: limit - 3] + "..."


def explain_gap(message: str) -> str:
    """Known differences between the embedded engine and OPA, said so the user can act."""
    for pattern, explanation in _GAPS:
        found = pattern.search(message)
        if found:
            return explanation.format(**found.groupdict())
    return message


def query_path(package: str, rule: str) -> str:
    return f"data.{package}.{rule}"
