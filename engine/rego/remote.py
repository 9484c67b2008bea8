"""Rego evaluated by the organisation's OPA server, through opa-python-client.

- **Upload** once per process, before the first query: each module with
  `PUT /v1/policies/gpuwarden/<policy id>/<file>` (the text exactly as written:
  `rego_compat=False`, no v0 rewriting), each top-level key of the data documents with
  `PUT /v1/data/<key>`.
- **Query** `POST /v1/data/<package path>/<rule>` with `{"input": ...}`; a response without
  `result` (`{}`) is an undefined rule: no finding.
- **Clients.** The CLI doors use the synchronous client. At the admission door the asynchronous
  client (aiohttp) runs on one event loop in a daemon thread shared by every remote policy, so
  concurrent admission requests, each evaluated in a webhook worker thread, share its connection
  pool; async callers can await `evaluate_async` directly.
- **Timeouts.** `timeout_s` (default 10 s: the client's own 1.5 s default is too short to send a
  5,000-resource plan) for the CLI, `admission_timeout_s` (default 2 s, inside the webhook's
  deadline) at admission.
- **Failures.** An unreachable or slow server is `RegoUnavailable` (CLI exit 2; at admission the
  policy's failure policy decides); an OPA error answer (compile error, conflict at evaluation)
  is `RegoError` naming the module file and line when OPA gives one.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import importlib
import re
import threading
from collections.abc import Awaitable, Coroutine, Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, TypeVar
from urllib.parse import urlsplit

from engine.core.errors import InputError
from engine.core.model import Door
from engine.rego.common import UNDEFINED, RegoError, RegoModule, RegoUnavailable

_T = TypeVar("_T")
_OPA_LOCATION = re.compile(r"(?P<file>[\w./-]+\.rego):(?P<line>\d+)")


def parse_opa_url(url: str, *, file: str | None = None) -> tuple[str, int, bool]:
    """(host, port, tls) of `http(s)://host[:port]`; OPA's API lives at its root."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"opa_url {url!r}: expected http(s)://host[:port]", file=file)
    if parts.path not in ("", "/") or parts.query:
        raise InputError(f"opa_url {url!r}: give the server root, not a path (gpuwarden "
                         "calls /v1/policies and /v1/data itself)", file=file)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 8181)
    except ValueError:
        raise InputError(f"opa_url {url!r}: invalid port", file=file) from None
    return parts.hostname, port, parts.scheme == "https"


class _LoopThread:
    """One event loop in a daemon thread: where the async OPA clients live."""

    _shared: _LoopThread | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.clients: list[Any] = []
        thread = threading.Thread(target=self.loop.run_forever, name="gpuwarden-opa",
                                  daemon=True)
        thread.start()
        atexit.register(self.close)

    def close(self) -> None:
        """Close the async clients' sessions (aiohttp warns about open ones at exit)."""

        async def close_all() -> None:
            for client in self.clients:
                await client.close_connection()

        # Exiting anyway: a session that will not close is not an error worth a traceback.
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(2.0)

    @classmethod
    def shared(cls) -> _LoopThread:
        with cls._guard:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def run(self, coroutine: Coroutine[Any, Any, _T], timeout: float) -> _T:
        future: concurrent.futures.Future[_T] = asyncio.run_coroutine_threadsafe(coroutine,
                                                                                 self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise


class RemoteEvaluator:
    """Modules and data of one policy on an OPA server."""

    def __init__(self, modules: Sequence[RegoModule], data: Mapping[str, Any], *, url: str,
                 policy_id: str, file: str, timeout_s: float = 10.0,
                 admission_timeout_s: float = 2.0, token: str | None = None):
        self.host, self.port, self.tls = parse_opa_url(url, file=file)
        self.url = url.rstrip("/")
        self.modules = tuple(modules)
        self.file = file
        self.timeout_s = timeout_s
        self.admission_timeout_s = admission_timeout_s
        self.token = token
        for key, value in data.items():
            if not isinstance(value, dict):
                raise InputError(f"data document key {key!r}: an OPA server takes data as "
                                 "objects under top-level keys (PUT /v1/data/<key>)", file=file)
        self.data = dict(data)
        self.ids = {m.shown: f"gpuwarden/{policy_id}/{PurePosixPath(m.shown).name}"
                    for m in modules}
        self._sync_client: Any = None
        self._async_clients: dict[int, Any] = {}  # per event loop (aiohttp sessions are bound)
        self._uploaded = False
        self._async_uploaded = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ interface

    def evaluate(self, paths: Sequence[str], input_doc: Any, door: Door = "plan") -> dict[str, Any]:
        if door == "admission":
            loop = _LoopThread.shared()
            try:
                return loop.run(self.evaluate_async(paths, input_doc),
                                self.admission_timeout_s * (len(paths) + 1) + 1.0)
            except concurrent.futures.TimeoutError:
                raise self._unavailable("timed out") from None
        with self._lock:
            self._upload_sync()
            return {path: value for path in paths
                    if (value := self._query_sync(path, input_doc)) is not UNDEFINED}

    def evaluate_many(self, paths: Sequence[str], inputs: Iterable[Any],
                      door: Door = "plan") -> list[dict[str, Any] | InputError]:
        """Per input, in order, its values or (at admission) the error it raised: OPA's Data
        API takes one input per request. At the other doors the first error stops, as there a
        server that does not answer stops the run."""
        if door != "admission":
            return [self.evaluate(paths, input_doc, door) for input_doc in inputs]
        results: list[dict[str, Any] | InputError] = []
        for input_doc in inputs:
            try:
                results.append(self.evaluate(paths, input_doc, door))
            except (RegoError, RegoUnavailable) as exc:
                results.append(exc)
        return results

    async def evaluate_async(self, paths: Sequence[str], input_doc: Any) -> dict[str, Any]:
        await self._upload_async()
        answers = await asyncio.gather(*(self._query_async(path, input_doc) for path in paths))
        return {path: value for path, value in zip(paths, answers, strict=True)
                if value is not UNDEFINED}

    # ------------------------------------------------------------------ sync client

    def _client(self) -> Any:
        if self._sync_client is None:
            opa_client = importlib.import_module("opa_client")
            self._sync_client = opa_client.OpaClient(
                host=self.host, port=self.port, ssl=self.tls, token=self.token,
                timeout=self.timeout_s, retries=1)
        return self._sync_client

    def _upload_sync(self) -> None:
        if self._uploaded:
            return
        client = self._client()
        for module in self.modules:
            self._call(client.update_policy_from_string, module.text, self.ids[module.shown],
                       rego_compat=False, module=module)
        for key, value in self.data.items():
            self._call(client.update_or_create_data, value, key)
        self._uploaded = True

    def _query_sync(self, path: str, input_doc: Any) -> Any:
        package, rule = _split(path)
        answer = self._call(self._client().query_rule, input_doc, package, rule)
        return answer["result"] if isinstance(answer, dict) and "result" in answer else UNDEFINED

    def _call(self, method: Any, *args: Any, module: RegoModule | None = None,
              **kwargs: Any) -> Any:
        requests_errors = importlib.import_module("requests.exceptions")
        opa_errors = importlib.import_module("opa_client.errors")
        try:
            return method(*args, **kwargs)
        except (requests_errors.ConnectionError, requests_errors.Timeout) as exc:
            raise self._unavailable(type(exc).__name__) from None
        except requests_errors.HTTPError as exc:
            raise self._answer_error(exc.response) from None
        except opa_errors.RegoParseError as exc:
            raise self._compile_error(exc, module) from None
        except (opa_errors.ConnectionsError, opa_errors.QueryExecuteError) as exc:
            raise self._unavailable(str(getattr(exc, "message", exc))) from None
        except ValueError as exc:  # a response body that is not JSON
            raise self._unavailable(f"unreadable answer ({exc})") from None

    # ------------------------------------------------------------------ async client

    async def _aclient(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._async_clients.get(id(loop))
        if client is None:
            opa_client = importlib.import_module("opa_client")
            client = opa_client.AsyncOpaClient(
                host=self.host, port=self.port, ssl=self.tls, token=self.token,
                timeout=self.admission_timeout_s, retries=0)
            await client.__aenter__()
            self._async_clients[id(loop)] = client
            if loop is _LoopThread.shared().loop:
                _LoopThread.shared().clients.append(client)
        return client

    async def _upload_async(self) -> None:
        """Upload once; concurrent first requests may both upload (PUT is idempotent)."""
        if self._async_uploaded or self._uploaded:
            return
        client = await self._aclient()
        for module in self.modules:
            await self._acall(client.update_policy_from_string(
                module.text, self.ids[module.shown], rego_compat=False), module)
        for key, value in self.data.items():
            await self._acall(client.update_or_create_data(value, key))
        self._async_uploaded = True

    async def _query_async(self, path: str, input_doc: Any) -> Any:
        package, rule = _split(path)
        client = await self._aclient()
        answer = await self._acall(client.query_rule(input_doc, package, rule))
        return answer["result"] if isinstance(answer, dict) and "result" in answer else UNDEFINED

    async def _acall(self, call: Awaitable[Any], module: RegoModule | None = None) -> Any:
        aiohttp = importlib.import_module("aiohttp")
        opa_errors = importlib.import_module("opa_client.errors")
        try:
            return await call
        except aiohttp.ClientResponseError as exc:
            raise RegoError(f"OPA at {self.url} answered {exc.status} {exc.message}",
                            file=self.file) from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._unavailable(type(exc).__name__) from None
        except opa_errors.RegoParseError as exc:
            raise self._compile_error(exc, module) from None
        except ValueError as exc:
            raise self._unavailable(f"unreadable answer ({exc})") from None

    # ------------------------------------------------------------------ errors

    def _unavailable(self, why: str) -> RegoUnavailable:
        return RegoUnavailable(f"OPA at {self.url} did not answer: {why}", file=self.file)

    def _compile_error(self, exc: Any, module: RegoModule | None) -> RegoError:
        errors = [e for e in getattr(exc, "errors", None) or [] if isinstance(e, dict)]
        first = errors[0] if errors else {}
        location = first.get("location") if isinstance(first.get("location"), dict) else {}
        message = first.get("message") or getattr(exc, "message", None) or str(exc)
        row = location.get("row") if isinstance(location, dict) else None
        return RegoError(f"OPA rejected the module: {message}",
                         file=module.shown if module else self.file,
                         line=row if isinstance(row, int) else None)

    def _answer_error(self, response: Any) -> RegoError:
        try:
            body = response.json()
        except ValueError:
            body = {}
        message = str(body.get("message") or f"HTTP {response.status_code}") \
            if isinstance(body, dict) else f"HTTP {response.status_code}"
        for shown, opa_id in self.ids.items():
            message = message.replace(opa_id, shown)
        found = _OPA_LOCATION.search(message)
        if found and found.group("file") in self.ids:
            return RegoError(f"OPA: {message}", file=found.group("file"),
                             line=int(found.group("line")))
        return RegoError(f"OPA: {message}", file=self.file)


def _split(path: str) -> tuple[str, str]:
    """`data.a.b.rule` → (`a.b`, `rule`)."""
    dotted = path.removeprefix("data.")
    package, _, rule = dotted.rpartition(".")
    return package, rule
