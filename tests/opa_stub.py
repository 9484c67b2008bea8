"""A stand-in for an OPA server: OPA's REST Policy and Data API, evaluated by OPA's own engine.

No OPA binary can be installed where gpuwarden's tests and benchmarks run, so this serves the
part of OPA's API that gpuwarden and opa-python-client use, with OPA's request and response
shapes, over loopback HTTP:

- `PUT /v1/policies/{id}` (text/plain): `200 {}`, or `400 {code, message, errors: [{code,
  message, location: {file, row, col}}]}` when the module does not compile;
- `GET /v1/policies`, `GET /v1/policies/{id}`, `DELETE /v1/policies/{id}`: `{"result": ...}`
  or `404`;
- `PUT /v1/data/{path}` (JSON): `204`;
- `POST /v1/data/{path}` with `{"input": ...}` (and `GET`): `{"result": value}`, `{}` when
  undefined, `500 {code, message}` when evaluation fails;
- `GET /health`: `200 {}`.

Evaluation is OPA's: OPA v1.20.2's Go `rego` package, in process through the test oracle
`opa-golib-python-bindings` (`OPA_ORACLE_INSTALL`), so remote results in the tests are OPA's
results. Where the oracle is not installed (benchmarks on a bare machine) the stub falls back to
regorus (`stub.evaluator` says which); tests/test_rego_remote.py requires OPA. Modules are Rego v1
as OPA 1.x takes them; `v0_compatible=True` takes v0 modules as `opa run --v0-compatible` does
(unless they `import rego.v1`): the oracle has no v0 switch, so it gets them through `rego_v1`,
the mechanical part of `opa fmt --v0-v1`. The HTTP layer is the stand-in's: no bundle, decision
log, authorization or TLS.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from engine.rego.embedded import import_regorus

# OPA's own evaluator (v1.20.2, its Go `rego` package as a C library): a test oracle only.
OPA_ORACLE_INSTALL = "pip install --ignore-requires-python opa-golib-python-bindings==0.4.4"
OPA_ORACLE_MISSING = f"OPA's engine (the test oracle) is not installed: {OPA_ORACLE_INSTALL}"


_V0_HEAD = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?P<rest>.*?)\s*\{\s*$")
_V0_ELSE = re.compile(r"^(?P<head>\}?\s*else\b.*?)\s*\{\s*$")
_NOT_HEADS = ("package", "import", "default", "some", "every", "not")


def rego_v1(text: str) -> str:
    """A Rego v0 module (Gatekeeper's style) as v1, for OPA 1.x, which the oracle is and which
    has no v0 switch here: rule heads at column 0 get `if`, partial sets `contains`. The
    mechanical part of `opa fmt --v0-v1`; a module with `import rego.v1` is returned as is."""
    if re.search(r"^\s*import\s+rego\.v1\b", text, re.MULTILINE):
        return text
    return "\n".join(_v1_line(line) for line in text.split("\n"))


def _v1_line(line: str) -> str:
    found = _V0_HEAD.match(line)
    if found and found.group("name") not in _NOT_HEADS and " if " not in line:
        name, rest = found.group("name"), found.group("rest")
        if rest.startswith("[") and rest.endswith("]") and _closes_at_end(rest):
            return f"{name} contains {rest[1:-1]} if {{"
        return f"{name}{rest} if {{"
        # a body-less `name = value` has no `{` and needs nothing
    found = _V0_ELSE.match(line)
    if found and " if " not in line:
        return f"{found.group('head')} if {{"
    return line


def _closes_at_end(rest: str) -> bool:
    """True when the `[` opening `rest` is closed by its last character (a partial set)."""
    depth = 0
    for index, char in enumerate(rest):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            return index == len(rest) - 1
    return False


def opa_bindings() -> Any:
    """The `opa_bindings` module (OpaEngine, OpaError, OpaUndefinedError), or None."""
    try:
        import opa_bindings  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except (ImportError, OSError):  # OSError: the shared library does not load here
        return None
    return opa_bindings

_ENGINES = threading.local()  # per thread, module-wide: engines are dropped by their own thread
_SERIALS = itertools.count()
_LOCATION = re.compile(r"-->\s*(?P<file>.+?):(?P<row>\d+):(?P<col>\d+)")
_ERROR = re.compile(r"^\s*error:\s*(?P<message>.+?)\s*$", re.MULTILINE)


class OpaStub:
    """Policies and data, and an engine (OPA's, else regorus) rebuilt when they change."""

    def __init__(self, *, v0_compatible: bool = False) -> None:
        self.opa = opa_bindings()
        self.evaluator = "opa" if self.opa is not None else "regorus"
        self.regorus = import_regorus() if self.opa is None else None
        self._opa_engine: tuple[int, Any] | None = None
        self.v0_compatible = v0_compatible
        self.policies: dict[str, str] = {}
        self.data: dict[str, Any] = {}
        self.version = 0  # bumped on every change; the engine is rebuilt after one
        self._lock = threading.Lock()
        self.serial = next(_SERIALS)
        self.requests = 0
        # regorus engines belong to the thread that made them: every evaluation runs on this
        # one worker, which drops its engine itself when the stub closes.
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="opa-stub")

    def close(self) -> None:
        self._worker.shutdown(wait=True)

    def put_policy(self, policy_id: str, text: str) -> tuple[int, Any]:
        # Compile outside the lock: the compile runs on the worker, which may be waiting for
        # the lock itself to rebuild its engine for a query (holding it here deadlocks).
        with self._lock:
            candidate = {**self.policies, policy_id: text}
        problem = self._compile_error(candidate, policy_id)
        if problem is not None:
            return HTTPStatus.BAD_REQUEST, problem
        with self._lock:
            self.policies[policy_id] = text
            self.version += 1
        return HTTPStatus.OK, {}

    def delete_policy(self, policy_id: str) -> tuple[int, Any]:
        with self._lock:
            if self.policies.pop(policy_id, None) is None:
                return HTTPStatus.NOT_FOUND, _error("resource_not_found", f"policy {policy_id}")
            self.version += 1
        return HTTPStatus.OK, {}

    def put_data(self, path: list[str], value: Any) -> tuple[int, Any]:
        with self._lock:
            if not path:
                if not isinstance(value, dict):
                    return HTTPStatus.BAD_REQUEST, _error("invalid_parameter",
                                                          "the data root must be an object")
                self.data = value
            else:
                node = self.data
                for key in path[:-1]:
                    node = node.setdefault(key, {})
                    if not isinstance(node, dict):
                        return HTTPStatus.BAD_REQUEST, _error("invalid_parameter", "conflict")
                node[path[-1]] = value
            self.version += 1
        return HTTPStatus.NO_CONTENT, None

    def query(self, path: list[str], input_doc: Any) -> tuple[int, Any]:
        if self.opa is not None:
            return self._opa_query(path, input_doc)
        return self._worker.submit(self._query, path, input_doc).result()

    # ------------------------------------------------------------------ OPA's engine

    def _opa_query(self, path: list[str], input_doc: Any) -> tuple[int, Any]:
        assert self.opa is not None
        engine = self._current_opa_engine()
        try:
            return HTTPStatus.OK, {"result": engine.eval_document(".".join(path), input_doc)}
        except self.opa.OpaUndefinedError:
            return HTTPStatus.OK, {}
        except self.opa.OpaError as exc:
            return HTTPStatus.INTERNAL_SERVER_ERROR, _error("internal_error", _opa_message(exc))

    def _current_opa_engine(self) -> Any:
        """One OPA engine per version of the policies and data (OPA's engine is thread-safe)."""
        with self._lock:
            if self._opa_engine is not None and self._opa_engine[0] == self.version:
                return self._opa_engine[1]
            engine = self._opa_engine_for(self.policies)
            if self.data:
                engine.add_data(self.data)
            self._opa_engine = (self.version, engine)
            return engine

    def _opa_engine_for(self, policies: dict[str, str]) -> Any:
        assert self.opa is not None
        engine = self.opa.OpaEngine()
        for policy_id, text in policies.items():
            engine.add_policy(policy_id, rego_v1(text) if self.v0_compatible else text)
        return engine

    def _opa_compile(self, policies: dict[str, str]) -> dict[str, Any] | None:
        """OPA's answer to a module that does not compile: parse errors when added, the rest
        (unsafe variables, type errors) when the first query is prepared."""
        assert self.opa is not None
        try:
            engine = self._opa_engine_for(policies)
            engine.eval_query("true")
        except self.opa.OpaError as exc:
            return {"code": "invalid_parameter",
                    "message": "error(s) occurred while compiling module(s)",
                    "errors": _opa_errors(exc.message)}
        engine.close()
        return None

    def _query(self, path: list[str], input_doc: Any) -> tuple[int, Any]:
        reference = ".".join(["data", *path])
        engine = self._thread_engine()
        try:
            engine.set_input_json(orjson.dumps(input_doc).decode())
            answer = orjson.loads(engine.eval_query_as_json(reference))
        except RuntimeError as exc:
            return HTTPStatus.INTERNAL_SERVER_ERROR, _error("internal_error", _one_line(exc))
        results = answer.get("result") or []
        if not results:
            return HTTPStatus.OK, {}
        return HTTPStatus.OK, {"result": results[0]["expressions"][0]["value"]}

    # ------------------------------------------------------------------ internals

    def _thread_engine(self) -> Any:
        """This thread's engine for the current policies and data (regorus engines are bound
        to the thread that made them; the server handles each connection in a new thread)."""
        engines: dict[int, tuple[int, Any]] = _ENGINES.__dict__.setdefault("engines", {})
        built = engines.get(self.serial)
        if built is not None and built[0] == self.version:
            return built[1]
        with self._lock:
            version, policies, data = self.version, dict(self.policies), self.data
            data_json = orjson.dumps(data).decode()
        engine = self._new_engine()
        for policy_id, text in policies.items():
            engine.add_policy(policy_id, text)
        engine.add_data_json(data_json)
        engines[self.serial] = (version, engine)
        return engine

    def _new_engine(self) -> Any:
        assert self.regorus is not None
        engine = self.regorus.Engine()
        if self.v0_compatible:
            engine.set_rego_v0(True)
        return engine

    def _compile_error(self, policies: dict[str, str], policy_id: str) -> dict[str, Any] | None:
        if self.opa is not None:
            return self._opa_compile(policies)
        return self._worker.submit(self._compile, policies).result()

    def _compile(self, policies: dict[str, str]) -> dict[str, Any] | None:
        assert self.regorus is not None
        engine = self._new_engine()
        for name, text in policies.items():
            try:
                engine.add_policy(name, text)
            except RuntimeError as exc:
                found = _LOCATION.search(str(exc))
                location = {"file": found.group("file"), "row": int(found.group("row")),
                            "col": int(found.group("col"))} if found else {"file": name}
                return {
                    "code": "invalid_parameter",
                    "message": "error(s) occurred while compiling module(s)",
                    "errors": [{"code": "rego_parse_error", "message": _one_line(exc),
                                "location": location}],
                }
        return None


_OPA_ERROR = re.compile(
    r"(?:^|occurred: )(?P<file>[^\s:]+):(?P<row>\d+): (?P<code>rego_\w+): (?P<message>.*)$")


def _opa_errors(message: str) -> list[dict[str, Any]]:
    """OPA's error list (`file:row: rego_parse_error: text` lines, a caret line under each) as
    its REST API gives it: `[{code, message, location: {file, row, col}}]`."""
    lines = message.splitlines()
    errors = []
    for index, line in enumerate(lines):
        found = _OPA_ERROR.search(line.strip())
        if found:
            caret = lines[index + 2] if index + 2 < len(lines) else ""
            col = caret.lstrip("\t").find("^") + 1 if "^" in caret else 1
            errors.append({"code": found.group("code"), "message": found.group("message"),
                           "location": {"file": found.group("file"),
                                        "row": int(found.group("row")), "col": max(col, 1)}})
    return errors or [{"code": "rego_compile_error", "message": " ".join(message.split())}]


def _opa_message(exc: Any) -> str:
    """An evaluation error as OPA's server words it (`1 error occurred: file:row: code: text`)."""
    return f"1 error occurred: {' '.join(str(exc.message).split())}"


def _one_line(exc: BaseException) -> str:
    text = str(exc).split("Stack backtrace:", 1)[0]
    found, message = _LOCATION.search(text), _ERROR.search(text)
    what = message.group("message") if message else " ".join(text.split())
    return f"{found.group('file')}:{found.group('row')}: {what}" if found else what


def _error(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, status: int, body: Any) -> None:
        payload = b"" if body is None else orjson.dumps(body)
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _route(self) -> tuple[str, list[str]]:
        path = unquote(urlsplit(self.path).path).strip("/")
        parts = path.split("/") if path else []
        if parts[:1] == ["v1"] and len(parts) >= 2:
            return parts[1], parts[2:]
        return "/".join(parts), []

    def do_GET(self) -> None:
        stub = self.server.stub
        stub.requests += 1
        kind, rest = self._route()
        if kind == "health":
            self._answer(HTTPStatus.OK, {})
        elif kind == "policies" and not rest:
            self._answer(HTTPStatus.OK, {"result": [{"id": i, "raw": t}
                                                    for i, t in stub.policies.items()]})
        elif kind == "policies":
            policy_id = "/".join(rest)
            if policy_id in stub.policies:
                self._answer(HTTPStatus.OK, {"result": {"id": policy_id,
                                                        "raw": stub.policies[policy_id]}})
            else:
                self._answer(HTTPStatus.NOT_FOUND, _error("resource_not_found", policy_id))
        elif kind == "data":
            self._answer(*stub.query(rest, None))
        else:
            self._answer(HTTPStatus.NOT_FOUND, _error("not_found", self.path))

    def do_PUT(self) -> None:
        stub = self.server.stub
        stub.requests += 1
        kind, rest = self._route()
        body = self._body()
        if kind == "policies" and rest:
            self._answer(*stub.put_policy("/".join(rest), body.decode("utf-8")))
        elif kind == "data":
            try:
                value = orjson.loads(body) if body else {}
            except orjson.JSONDecodeError as exc:
                self._answer(HTTPStatus.BAD_REQUEST, _error("invalid_parameter", str(exc)))
                return
            self._answer(*stub.put_data(rest, value))
        else:
            self._answer(HTTPStatus.NOT_FOUND, _error("not_found", self.path))

    def do_POST(self) -> None:
        stub = self.server.stub
        stub.requests += 1
        kind, rest = self._route()
        if kind != "data":
            self._answer(HTTPStatus.NOT_FOUND, _error("not_found", self.path))
            return
        try:
            body = orjson.loads(self._body() or b"{}")
        except orjson.JSONDecodeError as exc:
            self._answer(HTTPStatus.BAD_REQUEST, _error("invalid_parameter", str(exc)))
            return
        self._answer(*stub.query(rest, body.get("input") if isinstance(body, dict) else None))

    def do_DELETE(self) -> None:
        stub = self.server.stub
        kind, rest = self._route()
        if kind == "policies" and rest:
            self._answer(*stub.delete_policy("/".join(rest)))
        else:
            self._answer(HTTPStatus.NOT_FOUND, _error("not_found", self.path))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], stub: OpaStub):
        super().__init__(address, _Handler)
        self.stub = stub


@contextmanager
def serve(host: str = "127.0.0.1", port: int = 0, *,
          v0_compatible: bool = False) -> Iterator[tuple[str, OpaStub]]:
    """Run the stand-in on loopback in a thread; yields (its URL, the stub's state)."""
    stub = OpaStub(v0_compatible=v0_compatible)
    server = _Server((host, port), stub)
    thread = threading.Thread(target=server.serve_forever, name="opa-stub", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}", stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        stub.close()
