"""A bounded pool for policy evaluations that answers at once when it is full.

A thread cannot be stopped: an evaluation that passes its deadline keeps running, and under
`asyncio.to_thread` such abandoned work piles up until nothing else gets a thread. Here every
evaluation holds a slot from submission until it really ends (returns, raises, or is cancelled
before it started), not until its caller stops waiting; when no slot is free, `run` raises
`Busy` at once and the caller answers without a verdict.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class Busy(Exception):
    """Every evaluation slot is taken (running or waiting for a thread)."""


class BoundedExecutor:
    """`workers` threads; at most `capacity` evaluations running or queued at once."""

    def __init__(self, workers: int, capacity: int):
        if workers < 1 or capacity < workers:
            raise ValueError("need at least one worker and capacity ≥ workers")
        self.workers = workers
        self.capacity = capacity
        self._pool = ThreadPoolExecutor(max_workers=workers,
                                        thread_name_prefix="gpuwarden-evaluation")
        self._slots = threading.BoundedSemaphore(capacity)
        self._lock = threading.Lock()
        self._held = 0

    @property
    def in_flight(self) -> int:
        """Evaluations holding a slot, abandoned ones included."""
        return self._held

    def submit(self, function: Callable[..., T], *args: object) -> Future[T]:
        if not self._slots.acquire(blocking=False):
            raise Busy(f"all {self.capacity} evaluation slots are taken")
        with self._lock:
            self._held += 1
        try:
            future = self._pool.submit(function, *args)
        except BaseException:
            self._release()
            raise
        future.add_done_callback(lambda _: self._release())
        return future

    async def run(self, function: Callable[..., T], *args: object, timeout: float) -> T:
        """`function(*args)` in a worker thread; TimeoutError after `timeout` seconds (the work
        goes on, holding its slot, unless it had not started yet: then it never starts)."""
        future = self.submit(function, *args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=timeout)
        except TimeoutError:
            future.cancel()  # succeeds only while queued
            raise

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _release(self) -> None:
        with self._lock:
            self._held -= 1
        self._slots.release()
