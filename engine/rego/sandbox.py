"""Rego evaluation in a worker process, with a time limit per request and a memory cap.

Why a process: the regorus bindings hold the GIL for a whole evaluation and offer no time,
instruction or memory limit, and when an allocation fails regorus aborts the process (exit
134). A Rego policy from a pull request or a ConfigMap can ask for `numbers.range(1, 3e8)`, and
regorus' parser takes exponential time on nested brackets; in-process, either would hang or
kill the CLI, the webhook or the Lambda. In a worker, the parent waits with a deadline, kills
the worker when it passes, and reports a worker that died (out of memory, a panic) as a
`RegoAborted` error naming the cause; the next request starts a fresh worker.

The trade-off: every evaluation crosses a pipe (the input document as JSON one way, the rule
values back): tens of microseconds per evaluation on top of regorus' own time, and one worker
start (about 0.1 s) per thread that evaluates Rego. Everything else considered keeps the GIL
held or the process exposed. Workers are per thread, like regorus engines were (a webhook
thread never waits on another's evaluation); each ends when its thread's state is dropped, at
interpreter exit, or as soon as the parent's end of its pipe closes.

Limits: `GPUWARDEN_REGO_MEMORY_MB` (default `DEFAULT_MEMORY_MB`) caps each worker's address
space; the time limits are the caller's (the policy's `timeout_s` / `admission_timeout_s`, and
`LOAD_TIMEOUT_S` for parsing and compiling at load).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import IO, Any, NamedTuple

import orjson

from engine.rego.common import RegoAborted
from engine.rego.worker import MEMORY_ENV, frame

DEFAULT_MEMORY_MB = 2048
LOAD_TIMEOUT_S = 10.0
_FRAME_SIZE = 8
_ROOT = str(Path(__file__).resolve().parent.parent.parent)  # the directory holding `engine`
_THREAD = threading.local()

__all__ = ["LOAD_TIMEOUT_S", "Pending", "RegoAborted", "WorkerProcess", "thread_worker"]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    paths = [_ROOT] + [p for p in sys.path if p and isinstance(p, str)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault(MEMORY_ENV, str(DEFAULT_MEMORY_MB))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _stop(process: subprocess.Popen[bytes], errors: IO[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()
    errors.close()


class Pending(NamedTuple):
    """A request sent to a worker, its answer not read yet."""

    deadline: float  # time.monotonic() by which the answer must have come
    timeout_s: float
    what: str


class WorkerProcess:
    """One worker process and what it has loaded; used by one thread at a time."""

    def __init__(self) -> None:
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115  (closed with the worker)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-m", "engine.rego.worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                env=_environment(), close_fds=True,
            )
        except OSError as exc:
            self.errors.close()
            raise RegoAborted(f"rego: cannot start the Rego worker process: {exc}") from None
        self.loaded: set[int] = set()
        self._finalizer = weakref.finalize(self, _stop, self.process, self.errors)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self._finalizer()

    def request(self, header: dict[str, Any], payload: bytes = b"", *,
                timeout_s: float, what: str) -> tuple[dict[str, Any], bytes]:
        """Send one request and wait at most `timeout_s` for the answer; `RegoAborted` (and a
        dead worker) when it does not come. `what` says what was asked, for the message."""
        return self.receive(self.send(header, payload, timeout_s=timeout_s, what=what))

    def send(self, header: dict[str, Any], payload: bytes = b"", *,
             timeout_s: float, what: str) -> Pending:
        """Send one request without waiting: its time limit starts now. `receive` its answer
        before sending another (the worker answers in order, and an answer left unread can
        fill the pipe while the next request waits to be written)."""
        assert self.process.stdin is not None
        pending = Pending(time.monotonic() + timeout_s, timeout_s, what)
        try:
            self.process.stdin.write(frame(orjson.dumps(header), payload))
            self.process.stdin.flush()
        except (OSError, ValueError):
            raise self._died(what) from None
        return pending

    def receive(self, pending: Pending) -> tuple[dict[str, Any], bytes]:
        """The answer to the request `send` sent, by its deadline (see `request`)."""
        try:
            head = self._read(_FRAME_SIZE, pending.deadline)
            sizes = int.from_bytes(head[:4], "big"), int.from_bytes(head[4:], "big")
            answer = orjson.loads(self._read(sizes[0], pending.deadline))
            body = self._read(sizes[1], pending.deadline) if sizes[1] else b""
        except TimeoutError:
            self.close()
            raise RegoAborted(f"rego: {pending.what} exceeded its time limit of "
                              f"{pending.timeout_s:g} s") from None
        except (OSError, EOFError, ValueError):
            raise self._died(pending.what) from None
        if "panic" in answer:
            self.close()
            raise RegoAborted(f"rego: the embedded engine failed while {pending.what}: "
                              f"{_one_line(answer['panic'])}")
        return answer, body

    def _read(self, size: int, deadline: float) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        chunks: list[bytes] = []
        while size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def _died(self, what: str) -> RegoAborted:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.errors.seek(0)
        said = _one_line(self.errors.read()[-2000:].decode("utf-8", "replace"))
        self.close()
        cause = "out of memory" if "memory allocation" in said else (
            f"exit {code}" if code is not None and code >= 0 else f"signal {-(code or 0)}")
        limit = os.environ.get(MEMORY_ENV) or DEFAULT_MEMORY_MB
        detail = f": {said[:200]}" if said else ""
        return RegoAborted(f"rego: the embedded engine aborted while {what} ({cause}; the "
                           f"memory limit is {limit} MiB, {MEMORY_ENV}){detail}")


def _one_line(text: str) -> str:
    text = text.split("Stack backtrace:", 1)[0].split("stack backtrace:", 1)[0]
    return " ".join(text.split())


def thread_worker() -> WorkerProcess:
    """This thread's worker, started (again) when it has none or its last one died."""
    worker: WorkerProcess | None = getattr(_THREAD, "worker", None)
    if worker is None or not worker.alive:
        worker = _THREAD.worker = WorkerProcess()
    return worker
