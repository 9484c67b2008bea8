"""The Rego worker process: regorus engines evaluated where a runaway policy cannot hurt.

Run as a script (`python engine/rego/worker.py`) by `engine.rego.sandbox`; it imports only
regorus, orjson and the standard library, so it starts in a few tens of milliseconds. It caps
its own address space (`GPUWARDEN_REGO_MEMORY_MB`, set by the parent) so that a huge allocation
fails at once (regorus then aborts the process, which the parent reports) instead of swapping
the host, and serves requests on stdin/stdout until stdin closes.

Frames, both ways: two big-endian 32-bit lengths (header, payload), a JSON header, a payload of
raw bytes (the input document, or the answer's values). Requests (`op` in the header):

- `parse {name, text, v0}`: parse one module (for Rego v0 detection and parse errors);
- `load {key, family, sources, data, v0}`: build an engine for evaluator `key`; the most recent
  `MAX_ENGINES` are kept, an evicted one is reported `missing` and loaded again by the parent;
  an engine loaded with new data for the same `family` replaces the older one;
- `check {sources, entry_points}`: compile for regorus' VM (it resolves every function call);
- `eval {key, paths}` with the input as payload: the values of the defined `paths` (rules or
  base documents of `data`);
- `eval_batch {key, paths}` with a JSON array of inputs as payload: per input, in order,
  `{"values": {...}}` or `{"error": text}` (an engine error for one input does not stop the
  others), as a JSON array. One evaluation for the batch (`_gathering_rule`, `with input as`
  each input), again one by one when it errs.

Each engine also gets the OPA built-ins of `engine.rego.builtins` (OPA's `yaml.unmarshal` and
`glob.quote_meta` in place of regorus', built-ins regorus lacks such as `crypto.sha256`, and for
v0 modules v0's `any` and `all`); `check` renames calls to those regorus does not know to
stand-ins of the same arity, so that it still finds every other unknown function.

Answers: `{"ok": true}` (with the values as payload for `eval`, `{"v0": true}` for a module
that parses only as v0), `{"error": text}` for an engine error (the parent turns regorus' text
into `file:line`), `{"missing": true}`, or `{"panic": text}` for a panic of the engine, after
which the worker exits.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import struct
import sys
from collections import OrderedDict
from typing import Any, BinaryIO

MEMORY_ENV = "GPUWARDEN_REGO_MEMORY_MB"
MAX_ENGINES = 64
_FRAME = struct.Struct(">II")
_NOT_A_RULE = "not a valid rule path"
_V0_MARKERS = ("keyword is required",)
_UNKNOWN_FUNCTION = re.compile(r"Unknown function: '([\w.]+)'")


def read_frame(stream: BinaryIO) -> tuple[bytes, bytes] | None:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    header_size, payload_size = _FRAME.unpack(head)
    header = stream.read(header_size)
    payload = stream.read(payload_size) if payload_size else b""
    if len(header) < header_size or len(payload) < payload_size:
        return None
    return header, payload


def frame(header: bytes, payload: bytes = b"") -> bytes:
    return _FRAME.pack(len(header), len(payload)) + header + payload


class Worker:
    def __init__(self, regorus: Any, orjson: Any):
        self.regorus = regorus
        self.orjson = orjson
        self.engines: OrderedDict[int, Any] = OrderedDict()
        self.families: dict[int, int] = {}  # evaluator family → its engine key

    def handle(self, request: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        try:
            answer: tuple[dict[str, Any], bytes] = getattr(
                self, "op_" + str(request.get("op")))(request, payload)
            return answer
        except (RuntimeError, ValueError, TypeError) as exc:  # the bindings' engine errors
            return {"error": str(exc)}, b""

    def op_parse(self, request: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        engine = self.regorus.Engine()
        if request.get("v0"):
            engine.set_rego_v0(True)
        try:
            engine.add_policy(request["name"], request["text"])
        except RuntimeError as exc:
            if not request.get("v0") and any(m in str(exc) for m in _V0_MARKERS):
                return {"ok": True, "v0": True}, b""
            raise
        return {"ok": True, "v0": False}, b""

    def op_load(self, request: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        engine = self.regorus.Engine()
        if request.get("v0"):
            engine.set_rego_v0(True)
        from engine.rego import builtins

        provided = {**builtins.ALL_VERSIONS, **(builtins.V0_ONLY if request.get("v0") else {})}
        for name, (arity, function) in provided.items():
            engine.add_extension(name, arity, function)
        for name, text in request["sources"]:
            engine.add_policy(name, text)
        if request.get("data"):
            engine.add_data_json(request["data"])
        family = request.get("family")
        if family is not None:  # new data for an evaluator: its older engine is dropped
            self.engines.pop(self.families.get(family, -1), None)
            self.families[family] = request["key"]
        self.engines[request["key"]] = engine
        self.engines.move_to_end(request["key"])
        while len(self.engines) > MAX_ENGINES:
            self.engines.popitem(last=False)
        return {"ok": True}, b""

    def op_check(self, request: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        from engine.rego.builtins import STANDINS

        sources = [(str(name), str(text)) for name, text in request["sources"]]
        for _attempt in range(len(STANDINS) + 1):
            try:
                self.regorus.Program.compile_from_modules("{}", sources,
                                                          request["entry_points"])
            except Exception as exc:  # only unknown functions are errors here
                unknown = _UNKNOWN_FUNCTION.search(str(exc))
                if unknown is None:
                    break
                if unknown.group(1) not in STANDINS:  # not one gpuwarden provides
                    return {"error": str(exc)}, b""
                sources = _with_standin(sources, unknown.group(1), STANDINS[unknown.group(1)])
                continue
            break
        return {"ok": True}, b""

    def op_eval(self, request: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        engine = self.engines.get(request["key"])
        if engine is None:
            return {"missing": True}, b""
        self.engines.move_to_end(request["key"])
        engine.set_input_json(payload.decode())
        paths: list[str] = request["paths"]
        values = self._values(engine, paths)
        return {"ok": True}, self.orjson.dumps(values)

    def op_eval_batch(self, request: dict[str, Any],
                      payload: bytes) -> tuple[dict[str, Any], bytes]:
        engine = self.engines.get(request["key"])
        if engine is None:
            return {"missing": True}, b""
        self.engines.move_to_end(request["key"])
        paths: list[str] = request["paths"]
        try:
            engine.set_input_json(payload.decode())
            batch = self.orjson.loads(engine.eval_rule_as_json(_gathering_rule(engine, paths)))
            answers = [{"values": _defined(paths, values)} for values in batch]
        except (RuntimeError, ValueError, TypeError):  # an error for one input: tell which
            answers = [self._input_values(engine, self.orjson.dumps(item), paths)
                       for item in self.orjson.loads(payload)]
        return {"ok": True}, self.orjson.dumps(answers)

    def _input_values(self, engine: Any, input_json: bytes,
                      paths: list[str]) -> dict[str, Any]:
        try:
            engine.set_input_json(input_json.decode())
            values = self._values(engine, paths)
        except (RuntimeError, ValueError, TypeError) as exc:  # the bindings' engine errors
            return {"error": str(exc)}
        return {"values": values}

    def _values(self, engine: Any, paths: list[str]) -> dict[str, Any]:
        """All `paths` in one query, so the rules they share are computed once; `[x | x :=
        rule]` is `[]` for an undefined rule instead of undefining the query."""
        if len(paths) == 1:
            found, value = self._rule(engine, paths[0])
            return {paths[0]: value} if found else {}
        query = "[" + ", ".join(f"[x | x := {path}]" for path in paths) + "]"
        answer = self.orjson.loads(engine.eval_query_as_json(query))
        values = answer["result"][0]["expressions"][0]["value"]
        return {path: got[0] for path, got in zip(paths, values, strict=True) if got}

    def _rule(self, engine: Any, path: str) -> tuple[bool, Any]:
        try:
            text = engine.eval_rule_as_json(path)
        except RuntimeError as exc:
            if _NOT_A_RULE in str(exc):  # a base document of `data`, or nothing: ask the query
                return self._query(engine, path)
            raise
        value = self.orjson.loads(text)
        if value == "<undefined>":  # the bindings' marker; a rule may really hold that string
            return self._query(engine, path)
        return True, value

    def _query(self, engine: Any, path: str) -> tuple[bool, Any]:
        answer = self.orjson.loads(engine.eval_query_as_json(path))
        if not answer.get("result"):
            return False, None
        return True, answer["result"][0]["expressions"][0]["value"]


def _gathering_rule(engine: Any, paths: list[str]) -> str:
    """A rule added to `engine` the first time: for each input of the batch (`input` is their
    array), `_values`' query with that input as `input` (rules the paths share computed once
    per input). One evaluation per batch: regorus' set-up per evaluation costs more than a
    small policy."""
    package = "gpuwarden_gather_" + hashlib.sha256("\n".join(paths).encode()).hexdigest()[:16]
    if f"data.{package}" not in engine.get_packages():
        values = ", ".join(f"[x | x := {path}]" for path in paths)
        engine.add_policy(f"{package}.rego", f"package {package}\n\nbatch := [values | "
                          f"item := input[_]; values := [{values}] with input as item]\n")
    return f"data.{package}.batch"


def _defined(paths: list[str], values: list[list[Any]]) -> dict[str, Any]:
    return {path: got[0] for path, got in zip(paths, values, strict=True) if got}


def _with_standin(sources: list[tuple[str, str]], name: str,
                  standin: str) -> list[tuple[str, str]]:
    call = re.compile(r"\b" + re.escape(name) + r"(?=\s*\()")
    return [(module, call.sub(standin, text)) for module, text in sources]


def _limit_memory() -> None:
    setting = os.environ.get(MEMORY_ENV, "")
    if setting.isdigit() and int(setting) > 0:
        limit = int(setting) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    import importlib

    import orjson

    worker = Worker(importlib.import_module("regorus"), orjson)
    while True:
        received = read_frame(stdin)
        if received is None:
            return
        header, payload = received
        try:
            answer, out = worker.handle(orjson.loads(header), payload)
        except BaseException as exc:  # a pyo3 PanicException derives from BaseException
            stdout.write(frame(orjson.dumps({"panic": f"{type(exc).__name__}: {exc}"})))
            stdout.flush()
            return
        stdout.write(frame(orjson.dumps(answer), out))
        stdout.flush()


if __name__ == "__main__":
    _limit_memory()
    serve(sys.stdin.buffer, sys.stdout.buffer)
