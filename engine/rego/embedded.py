"""In-process Rego evaluation through the regorus bindings (the `rego` extra).

The bindings are the PyPI package `gordon-to-regorus` (module `regorus`), pinned exactly in
pyproject.toml: it is a single-maintainer fork, so an upgrade is a reviewed change, not a resolver
decision (docs/rego.md, "Supply chain").

What this module adds on top of the engine:

- **Rego v1 first, v0 where it can be rewritten.** A module that only parses as v0 (`deny[msg] {`,
  Gatekeeper templates) switches the engine to v0 mode; the v1 modules loaded beside it then get
  `import rego.v1` added after their `package` line (error lines are shifted back).
- **Checks before anything runs.** Parse errors, functions the engine does not know (an OPA
  built-in regorus lacks reads as "could not find function" only when reached, so the modules are
  also compiled once for regorus' VM, which resolves every call) and `http.send` (which regorus
  answers with undefined instead of a request) are load errors naming file and line.
- **Errors at evaluation** (a conflict, a division by zero, `some x in null`) stop evaluation with
  one line naming file and line; known gaps say how to write around them.
- **Threads.** A regorus engine belongs to the thread that made it (the bindings refuse, with a
  panic, to use or drop it anywhere else) and holds one input at a time, so each thread gets its
  own engine, built from the same checked sources on its first evaluation. The engines live in
  one thread-local registry, so each is dropped by its own thread when that thread ends.
"""

from __future__ import annotations

import importlib
import itertools
import re
import threading
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import orjson

from engine.errors import install_hint
from engine.model import Door
from engine.rego.common import (
    UNDEFINED,
    RegoError,
    RegoModule,
    query_path,
    rego_error,
    strip_comments,
)

REGORUS_REQUIREMENT = "gordon-to-regorus==0.13.0"
_V0_MARKERS = ("keyword is required",)
_V1_IMPORT = re.compile(r"^[ \t]*import[ \t]+rego\.v1\b", re.MULTILINE)
_HTTP_SEND = re.compile(r"\bhttp\.send\s*\(")
_NOT_A_RULE = "not a valid rule path"
_ENGINES = threading.local()  # per thread: {evaluator serial: regorus engine}
_SERIALS = itertools.count()


def import_regorus() -> ModuleType:
    """The regorus module, or a clear error saying how to install it."""
    try:
        return importlib.import_module("regorus")
    except ImportError:
        raise RegoError(
            f"the embedded Rego engine is not installed: {install_hint('rego')} "
            f"(it pins {REGORUS_REQUIREMENT}), or use evaluator: remote with an OPA server"
        ) from None


def _needs_v0(regorus: ModuleType, module: RegoModule) -> bool:
    """True when the module parses only as Rego v0; parse errors of any other kind raise."""
    scratch = regorus.Engine()
    try:
        scratch.add_policy(module.shown, module.text)
    except RuntimeError as exc:
        if any(marker in str(exc) for marker in _V0_MARKERS):
            return True
        raise rego_error(exc, default_file=module.shown) from None
    return False


def _with_v1_import(text: str) -> tuple[str, int]:
    """`text` with `import rego.v1` on a new line after `package` (its line number returned)."""
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("package"):
            lines.insert(number, "import rego.v1\n")
            return "".join(lines), number
    return text, 0


def _reject_network(module: RegoModule) -> None:
    for number, line in enumerate(strip_comments(module.text).splitlines(), start=1):
        if _HTTP_SEND.search(line):
            raise RegoError(
                "rego: http.send is not evaluated by the embedded engine (it would read as "
                "undefined, a silent wrong answer); use evaluator: remote",
                file=module.shown, line=number,
            )


def _check_calls(regorus: ModuleType, sources: list[tuple[str, str]], entry_points: list[str],
                 shifts: Mapping[str, int]) -> None:
    """Compile for regorus' VM, which resolves every function call; only unknown functions are
    errors here (the VM lacks a few features, e.g. `walk`, that the interpreter has)."""
    if not entry_points:
        return
    try:
        regorus.Program.compile_from_modules("{}", sources, entry_points)
    except Exception as exc:  # the bindings raise plain RuntimeError / ValueError
        if "Unknown function" in str(exc):
            raise rego_error(exc, default_file=sources[0][0], line_shift=shifts) from None


class EmbeddedEvaluator:
    """Rego modules and data loaded into one regorus engine, ready for any number of inputs."""

    def __init__(self, modules: Sequence[RegoModule], data: Mapping[str, Any],
                 entry_points: Sequence[str] = ()):
        regorus = import_regorus()
        for module in modules:
            _reject_network(module)
        v0 = {module.shown for module in modules if _needs_v0(regorus, module)}
        self.regorus = regorus
        self.v0 = bool(v0)
        self.shifts: dict[str, int] = {}
        self.sources: list[tuple[str, str]] = []
        for module in modules:
            text = module.text
            if v0 and module.shown not in v0 and not _V1_IMPORT.search(text):
                text, self.shifts[module.shown] = _with_v1_import(text)
            self.sources.append((module.shown, text))
        self.data_json = orjson.dumps(data).decode() if data else ""
        self.modules = tuple(modules)
        self.serial = next(_SERIALS)
        self._default_file = modules[0].shown if modules else "<rego>"
        self._engine()  # parse errors surface now, on the loading thread
        if not v0:
            _check_calls(regorus, self.sources, list(entry_points), self.shifts)

    def _build(self) -> Any:
        engine = self.regorus.Engine()
        if self.v0:
            engine.set_rego_v0(True)
        for shown, text in self.sources:
            try:
                engine.add_policy(shown, text)
            except RuntimeError as exc:
                raise rego_error(exc, default_file=shown, line_shift=self.shifts) from None
        if self.data_json:
            engine.add_data_json(self.data_json)
        return engine

    def _engine(self) -> Any:
        """This thread's engine (see "Threads" above)."""
        engines: dict[int, Any] = _ENGINES.__dict__.setdefault("engines", {})
        engine = engines.get(self.serial)
        if engine is None:
            engine = engines[self.serial] = self._build()
        return engine

    def evaluate(self, paths: Sequence[str], input_doc: Any,
                 door: Door = "plan") -> dict[str, Any]:
        """All `paths` in one query, so the rules they share (a plan index) are computed once;
        `[x | x := rule]` is `[]` for an undefined rule instead of undefining the query."""
        engine = self._engine()
        self._set_input(engine, input_doc)
        if len(paths) == 1:
            value = self._rule(engine, paths[0])
            return {} if value is UNDEFINED else {paths[0]: value}
        query = "[" + ", ".join(f"[x | x := {path}]" for path in paths) + "]"
        try:
            answer = orjson.loads(engine.eval_query_as_json(query))
        except RuntimeError as exc:
            raise rego_error(exc, default_file=self._default_file,
                             line_shift=self.shifts) from None
        values = answer["result"][0]["expressions"][0]["value"]
        return {path: found[0] for path, found in zip(paths, values, strict=True) if found}

    @staticmethod
    def _set_input(engine: Any, input_doc: Any) -> None:
        try:
            engine.set_input_json(orjson.dumps(input_doc).decode())
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise RegoError(f"rego: input is not JSON: {exc}") from None

    def _rule(self, engine: Any, path: str) -> Any:
        try:
            text = engine.eval_rule_as_json(path)
        except RuntimeError as exc:
            if _NOT_A_RULE in str(exc):
                return UNDEFINED
            raise rego_error(exc, default_file=self._default_file,
                             line_shift=self.shifts) from None
        value = orjson.loads(text)
        if value == "<undefined>":  # the bindings' marker; a rule may really hold that string
            answer = orjson.loads(engine.eval_query_as_json(path))
            return answer["result"][0]["expressions"][0]["value"] if answer.get("result") \
                else UNDEFINED
        return value

    def run_rule(self, package: str, rule: str) -> Any:
        """One rule with the input set by the caller (unit tests use `with input as`)."""
        engine = self._engine()
        self._set_input(engine, {})
        return self._rule(engine, query_path(package, rule))
