"""Rego evaluation through the regorus bindings (the `rego` extra), in a worker process.

The bindings are the PyPI package `gordon-to-regorus` (module `regorus`), pinned exactly in
pyproject.toml: it is a single-maintainer fork, so an upgrade is a reviewed change, not a resolver
decision (docs/rego.md, "Supply chain").

What this module adds on top of the engine:

- **Rego v1 first, v0 where it can be rewritten.** A module that only parses as v0 (`deny[msg] {`,
  Gatekeeper templates) switches the engine to v0 mode; the v1 modules loaded beside it then get
  `import rego.v1` added after their `package` line (error lines are shifted back).
- **Checks before anything runs.** Parse errors, functions the engine does not know (an OPA
  built-in regorus lacks reads as "could not find function" only when reached, so the modules are
  also compiled once for regorus' VM, which resolves every call), `http.send` (which regorus
  answers with undefined instead of a request) and `yaml.marshal` (YAML 1.2 text where OPA's
  differs) are load errors naming file and line.
- **Answers as OPA gives them, or none.** Base documents of `data` are read directly;
  `yaml.unmarshal` and `glob.quote_meta` are OPA's (engine.rego.yaml_go); an answer holding an
  integer past the 64-bit range (regorus computes it in floating point, OPA exactly) is refused.
  tests/test_rego_differential.py compares every answer with OPA's own engine.
- **Errors at evaluation** (a conflict, a division by zero, `some x in null`) stop evaluation with
  one line naming file and line; known gaps say how to write around them.
- **Limits.** regorus runs in a worker process (`engine.rego.sandbox`, which says why and what
  it costs): parsing and compiling get `LOAD_TIMEOUT_S`, each evaluation the evaluator's time
  limit (the policy's `timeout_s`, or `admission_timeout_s` at admission), and the worker a
  memory cap. An evaluation stopped by a limit or a crash raises `RegoAborted` (the findings
  turn it into an `unknown` finding); after `MAX_ABORTS` of them at the plan or runtime door the
  evaluator refuses at once there, so a hostile policy costs at most that many time limits per
  process. Admission never gives up this way: there the input is a tenant's, and a pod crafted
  to time out must not switch a policy off for the pods after it.
- **Batches.** Per-resource inputs at the plan and runtime doors (`input: resource`, and
  `input: admission` at runtime) reach the worker in batches (`evaluate_many`): one call, and
  one evaluation (`with input as` each input), per `MAX_BATCH_INPUTS` inputs or
  `MAX_BATCH_BYTES` of them, each call within the door's time limit. A batch a limit stops
  costs one time limit and no verdict: its inputs, and every later one of the evaluator, are
  then evaluated one per call as before batches, each within the limit and counted towards
  `MAX_ABORTS`, so one runaway input takes no other input's verdict with it. At admission
  every input is its own call.
- **Threads.** Each thread has its own worker (and so its own engines, built from the same
  checked sources on its first evaluation there); a worker holds one input at a time.
"""

from __future__ import annotations

import importlib
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import orjson

from engine.core.errors import InputError, install_hint
from engine.core.model import Door
from engine.rego import sandbox
from engine.rego.common import (
    UNDEFINED,
    RegoAborted,
    RegoError,
    RegoModule,
    query_path,
    rego_error,
    strip_comments,
)

REGORUS_REQUIREMENT = "gordon-to-regorus==0.13.0"
_V1_IMPORT = re.compile(r"^[ \t]*import[ \t]+rego\.v1\b", re.MULTILINE)
# Built-ins the embedded engine would answer differently from OPA, silently: refused at load.
_REFUSED_CALLS = {
    "http.send": "http.send is not evaluated by the embedded engine (it would read as "
                 "undefined, a silent wrong answer)",
    "yaml.marshal": "yaml.marshal writes YAML 1.2 in the embedded engine, where OPA quotes "
                    "`yes`, `y`, `on` (a different string, silently)",
}
_REFUSED_CALL = re.compile(r"\b(" + "|".join(re.escape(n) for n in _REFUSED_CALLS) + r")\s*\(")
_SERIALS = itertools.count()
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_ADMISSION_TIMEOUT_S = 2.0
MAX_ABORTS = 3
MAX_BATCH_INPUTS = 1000  # per worker call: a 5,000-change plan's GPU compute in a few calls
MAX_BATCH_BYTES = 8 * 2**20  # an input larger than this is a batch of its own
MAX_MODULE_BYTES = 2**20
INEXACT_FROM = 2.0**63  # integral floats from here on are regorus' overflowed integers
# How such a float reads in JSON (`1e+21`, `9.223372036854776e18`, 19 digits or more); text
# without it holds none, text with it (a string may hold it too) is walked value by value.
_MAYBE_INEXACT = re.compile(rb"[0-9][eE][-+]?[0-9]|[0-9]{19}")
# regorus' parser takes time exponential in nested [ and { (0.2 s at 12 levels, 3 s at 16)
MAX_BRACKET_DEPTH = 12
_V0_ALIAS = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|#[^\n]*|\bre_match(?=\s*\()')
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|[\[\]{}]')


def import_regorus() -> ModuleType:
    """The regorus module, or a clear error saying how to install it."""
    try:
        return importlib.import_module("regorus")
    except ImportError:
        raise RegoError(
            f"the embedded Rego engine is not installed: {install_hint('rego')} "
            f"(it pins {REGORUS_REQUIREMENT}), or use evaluator: remote with an OPA server"
        ) from None


def _with_v1_import(text: str) -> tuple[str, int]:
    """`text` with `import rego.v1` on a new line after `package` (its line number returned)."""
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("package"):
            lines.insert(number, "import rego.v1\n")
            return "".join(lines), number
    return text, 0


def _with_v0_aliases(text: str) -> str:
    """Rego v0's `re_match` (deprecated, used by Gatekeeper templates; regorus lacks it) as the
    `regex.match` it is an alias of, outside strings and comments; lines stay where they are."""
    return _V0_ALIAS.sub(lambda found: "regex.match" if found.group() == "re_match"
                         else found.group(), text)


def _reject_known_differences(module: RegoModule) -> None:
    for number, line in enumerate(strip_comments(module.text).splitlines(), start=1):
        found = _REFUSED_CALL.search(line)
        if found:
            raise RegoError(f"rego: {_REFUSED_CALLS[found.group(1)]}; use evaluator: remote",
                            file=module.shown, line=number)


def _parses_only_as_v0(module: RegoModule) -> bool:
    """True when the module parses only as Rego v0; parse errors of any other kind raise."""
    answer = _load_request({"op": "parse", "name": module.shown, "text": module.text},
                           f"parsing {module.shown}", module.shown, {})
    return bool(answer.get("v0"))


def _load_request(header: dict[str, Any], what: str, default_file: str,
                  shifts: Mapping[str, int]) -> dict[str, Any]:
    """A load-time request to this thread's worker; engine errors as `file:line` errors."""
    try:
        answer, _ = sandbox.thread_worker().request(header, timeout_s=sandbox.LOAD_TIMEOUT_S,
                                                    what=what)
    except RegoAborted as exc:
        raise RegoAborted(exc.message + " (deeply nested brackets or a huge module?)",
                          file=default_file) from None
    if "error" in answer:
        raise rego_error(RuntimeError(answer["error"]), default_file=default_file,
                         line_shift=shifts)
    return answer


class EmbeddedEvaluator:
    """Rego modules and data loaded into regorus engines (in worker processes), ready for any
    number of inputs. `timeout_s` limits one evaluation at the plan and runtime doors,
    `admission_timeout_s` at admission."""

    def __init__(self, modules: Sequence[RegoModule], data: Mapping[str, Any],
                 entry_points: Sequence[str] = (), *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 admission_timeout_s: float = DEFAULT_ADMISSION_TIMEOUT_S):
        import_regorus()  # a clear error when the bindings are missing
        for module in modules:
            _check_size(module)
            _check_nesting(module)
            _reject_known_differences(module)
        v0 = {module.shown for module in modules if _parses_only_as_v0(module)}
        self.v0 = bool(v0)
        self.shifts: dict[str, int] = {}
        self.sources: list[tuple[str, str]] = []
        for module in modules:
            text = module.text
            if v0 and module.shown not in v0 and not _V1_IMPORT.search(text):
                text, self.shifts[module.shown] = _with_v1_import(text)
            elif module.shown in v0:
                text = _with_v0_aliases(text)
            self.sources.append((module.shown, text))
        self.modules = tuple(modules)
        # (engine key, data JSON), swapped whole by replace_data: a new key for new data
        self._state = (next(_SERIALS), orjson.dumps(data).decode() if data else "")
        self.family = self.serial  # the worker keeps one engine per family
        self.timeouts = {"plan": timeout_s, "runtime": timeout_s,
                         "admission": admission_timeout_s}
        self.aborts = 0
        self.batch_inputs = MAX_BATCH_INPUTS  # 1 once a limit stopped a batch
        self._default_file = modules[0].shown if modules else "<rego>"
        self._load()  # parse errors surface now, on the loading thread
        if not v0 and entry_points:
            _load_request({"op": "check", "sources": self.sources,
                           "entry_points": list(entry_points)},
                          "compiling", self._default_file, self.shifts)

    @property
    def serial(self) -> int:
        return self._state[0]

    @property
    def data_json(self) -> str:
        return self._state[1]

    def replace_data(self, data: Mapping[str, Any]) -> None:
        """Evaluations that start from now on see `data` (the webhook's data.inventory): each
        thread's worker loads it on its next evaluation, in place of this evaluator's engine."""
        self._state = (next(_SERIALS), orjson.dumps(data).decode() if data else "")

    def _load(self, state: tuple[int, str] | None = None) -> None:
        serial, data_json = state or self._state
        _load_request({"op": "load", "key": serial, "family": self.family,
                       "sources": self.sources, "data": data_json, "v0": self.v0},
                      "loading the modules", self._default_file, self.shifts)
        sandbox.thread_worker().loaded.add(serial)

    def evaluate(self, paths: Sequence[str], input_doc: Any,
                 door: Door = "plan") -> dict[str, Any]:
        """The values of the defined `paths` for `input_doc`, in one query (rules they share,
        a plan index, are computed once). `RegoAborted` when a limit or a crash stopped it."""
        # At admission the input is a tenant's: a pod crafted to time out must not switch the
        # policy off for everyone after it, so only batch doors give up on a slow policy.
        if door != "admission" and self.aborts >= MAX_ABORTS:
            raise RegoAborted(f"rego: not evaluated: stopped by a limit {self.aborts} times "
                              "already in this run", file=self._default_file)
        payload = _input_json(input_doc)
        state = self._state  # one engine key and its data for the whole evaluation
        header = {"op": "eval", "key": state[0], "paths": list(paths)}
        try:
            answer, body = self._ask(header, payload, self.timeouts.get(door, 10.0), state)
        except RegoAborted as exc:
            if door != "admission":
                self.aborts += 1
            raise RegoAborted(exc.message, file=self._default_file) from None
        if "error" in answer:
            raise rego_error(RuntimeError(answer["error"]), default_file=self._default_file,
                             line_shift=self.shifts)
        values: dict[str, Any] = orjson.loads(body)
        _refuse_inexact_numbers(values, self._default_file)
        return values

    def evaluate_many(self, paths: Sequence[str], inputs: Iterable[Any],
                      door: Door = "plan") -> list[dict[str, Any] | InputError]:
        """Per input, in order, what `evaluate` gives for it: the values, or the error it
        raised; see "Batches"."""
        if door == "admission":
            return [self._one(paths, input_doc, door) for input_doc in inputs]
        results: list[dict[str, Any] | InputError] = []
        sent: Callable[[], list[dict[str, Any] | InputError]] | None = None
        try:
            for batch in _batches(inputs, lambda: self.batch_inputs):
                # this batch was made while the worker evaluated the one sent before it
                if sent is not None:
                    answers, sent = sent, None
                    results.extend(answers())
                sent = self._send_batch(paths, batch, door)
            if sent is not None:
                answers, sent = sent, None
                results.extend(answers())
        except BaseException:
            if sent is not None:  # an answer that will not be read: the next worker starts afresh
                sandbox.thread_worker().close()
            raise
        return results

    def _one(self, paths: Sequence[str], input_doc: Any,
             door: Door) -> dict[str, Any] | InputError:
        try:
            return self.evaluate(paths, input_doc, door)
        except RegoError as exc:
            return exc

    def _one_by_one(self, paths: Sequence[str], batch: list[bytes],
                    door: Door) -> list[dict[str, Any] | InputError]:
        return [self._one(paths, orjson.loads(item), door) for item in batch]

    def _send_batch(self, paths: Sequence[str], batch: list[bytes],
                    door: Door) -> Callable[[], list[dict[str, Any] | InputError]]:
        """Send `batch` (encoded inputs) for one evaluation within the door's time limit; the
        function returned reads the answers. A single input, or any once a limit stopped a
        batch, is evaluated one per call (see "Batches")."""
        if len(batch) == 1 or self.batch_inputs == 1 or self.aborts >= MAX_ABORTS:
            done = self._one_by_one(paths, batch, door)
            return lambda: done
        state = self._state
        header = {"op": "eval_batch", "key": state[0], "paths": list(paths)}
        try:
            answer = self._ask_later(header, b"[" + b",".join(batch) + b"]",
                                     self.timeouts.get(door, 10.0), state)
        except RegoAborted:
            answer = None

        def answers() -> list[dict[str, Any] | InputError]:
            try:
                if answer is None:
                    raise RegoAborted("the worker did not take the batch")
                header, body = answer()
            except RegoAborted:
                self.batch_inputs = 1
                return self._one_by_one(paths, batch, door)
            if "error" in header:
                raise self._engine_error(header["error"])
            exact = _MAYBE_INEXACT.search(body) is None  # then no item needs walking
            return [self._batch_item(item, exact) for item in orjson.loads(body)]

        return answers

    def _ask_later(self, header: dict[str, Any], payload: bytes, timeout_s: float,
                   state: tuple[int, str]) -> Callable[[], tuple[dict[str, Any], bytes]]:
        """`_ask` in two steps: the request is sent now, its answer read when the function
        returned is called (before anything else is asked of this thread's worker)."""
        if state[0] not in sandbox.thread_worker().loaded:
            self._load(state)
        worker = sandbox.thread_worker()
        pending = worker.send(header, payload, timeout_s=timeout_s, what="evaluating the policy")

        def answer() -> tuple[dict[str, Any], bytes]:
            got = worker.receive(pending)
            if got[0].get("missing"):  # the worker dropped this engine for newer ones
                self._load(state)
                got = worker.request(header, payload, timeout_s=timeout_s,
                                     what="evaluating the policy")
            return got

        return answer

    def _batch_item(self, item: dict[str, Any], exact: bool) -> dict[str, Any] | InputError:
        if "error" in item:
            return self._engine_error(item["error"])
        values: dict[str, Any] = item["values"]
        try:
            if not exact:
                _refuse_inexact_numbers(values, self._default_file)
        except RegoError as exc:
            return exc
        return values

    def _engine_error(self, text: str) -> RegoError:
        return rego_error(RuntimeError(text), default_file=self._default_file,
                          line_shift=self.shifts)

    def _ask(self, header: dict[str, Any], payload: bytes, timeout_s: float,
             state: tuple[int, str] | None = None) -> tuple[dict[str, Any], bytes]:
        state = state or self._state
        if state[0] not in sandbox.thread_worker().loaded:
            self._load(state)
        worker = sandbox.thread_worker()
        answer, body = worker.request(header, payload, timeout_s=timeout_s,
                                      what="evaluating the policy")
        if answer.get("missing"):  # the worker dropped this engine for newer ones
            self._load(state)
            answer, body = worker.request(header, payload, timeout_s=timeout_s,
                                          what="evaluating the policy")
        return answer, body

    def run_rule(self, package: str, rule: str) -> Any:
        """One rule with an empty input (unit tests use `with input as`)."""
        path = query_path(package, rule)
        return self.evaluate([path], {}).get(path, UNDEFINED)


def _batches(inputs: Iterable[Any], most: Callable[[], int]) -> Iterator[list[bytes]]:
    """The inputs as JSON, in batches of at most `most()` inputs and `MAX_BATCH_BYTES`."""
    batch: list[bytes] = []
    size = 0
    for input_doc in inputs:
        encoded = _input_json(input_doc)
        if batch and (len(batch) >= most() or size + len(encoded) > MAX_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(encoded)
        size += len(encoded) + 1
    if batch:
        yield batch


def _input_json(input_doc: Any) -> bytes:
    try:
        return orjson.dumps(input_doc)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise RegoError(f"rego: input is not JSON: {exc}") from None


def _refuse_inexact_numbers(values: Any, file: str) -> None:
    """regorus computes integers past its integer range in floating point (`1e20 * 10` comes
    back as `1e+21`) where OPA is exact: an answer holding such a number is refused, not given."""
    pending = [values]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, float) and abs(value) >= INEXACT_FROM and value.is_integer():
            raise RegoError(f"rego: the answer holds {value!r}, past the embedded engine's "
                            "integer range (it computes there in floating point, OPA exactly); "
                            "use evaluator: remote for arbitrary-precision numbers", file=file)


def _check_size(module: RegoModule) -> None:
    if len(module.text) > MAX_MODULE_BYTES:
        raise RegoError(f"rego: module larger than {MAX_MODULE_BYTES // 1024} KiB",
                        file=module.shown)


def _check_nesting(module: RegoModule) -> None:
    text = strip_comments(module.text)
    depth = 0
    for found in _STRING_OR_BRACKET.finditer(text):
        token = found.group()
        if token in "[{":
            depth += 1
            if depth > MAX_BRACKET_DEPTH:
                raise RegoError(f"rego: brackets nested more than {MAX_BRACKET_DEPTH} deep (the "
                                "embedded engine parses deep nesting very slowly; flatten it, "
                                "or use evaluator: remote)", file=module.shown,
                                line=text.count("\n", 0, found.start()) + 1)
        elif token in "]}":
            depth = max(depth - 1, 0)
