"""The terminal the CLI talks to: colour or not, how wide, a progress indicator on stderr, one-
line notes, and how loud the provider SDKs' loggers are.

Colour only on a terminal and never when `NO_COLOR` is set (any value, https://no-color.org).
rich is imported on first use, so a run that writes JSON to a pipe never pays for it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING

from engine.core.errors import printable

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

# a report written to a pipe or a file, when COLUMNS does not say otherwise
DEFAULT_WIDTH = 120
MIN_WIDTH, MAX_WIDTH = 40, 1000
PROGRESS_DELAY_S = 1.0
# loggers of the provider SDKs and their HTTP stacks; they print errors only, unless debugging
SDK_LOGGERS = ("azure", "msal", "google", "googleapiclient", "grpc", "botocore", "boto3",
               "s3transfer", "urllib3", "kubernetes")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def is_terminal(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def wants_colour(stream: IO[str] | None) -> bool:
    return "NO_COLOR" not in os.environ and is_terminal(stream)


def report_width(stream: IO[str] | None) -> int:
    """Columns to lay a report out in: `COLUMNS` when set, else the terminal's width when
    `stream` is one, else DEFAULT_WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit():
        return min(max(int(columns), MIN_WIDTH), MAX_WIDTH)
    if is_terminal(stream):
        try:
            size = os.get_terminal_size(stream.fileno())  # type: ignore[union-attr]
        except (OSError, ValueError):
            return DEFAULT_WIDTH
        return min(max(size.columns, MIN_WIDTH), MAX_WIDTH) if size.columns else DEFAULT_WIDTH
    return DEFAULT_WIDTH


def console_for(stream: IO[str]) -> Console:
    """A rich Console on `stream` with our colour and width rules (rich's own detection
    honours NO_COLOR only when it is not empty, and still writes bold and underline)."""
    from rich.console import Console

    colour = wants_colour(stream)
    return Console(file=stream, width=report_width(stream), color_system="auto" if colour else None,
                   force_terminal=colour, no_color=not colour, highlight=False, emoji=False,
                   soft_wrap=False)


def print_renderable(renderable: RenderableType, stream: IO[str] | None = None) -> None:
    console_for(stream or sys.stdout).print(renderable)


def note(message: str, *, quiet: bool = False) -> None:
    """An informational line on stderr (`--quiet` drops it)."""
    if not quiet:
        sys.stderr.write(f"gpuwarden: {printable(message, 1000)}\n")


def warn(message: str) -> None:
    sys.stderr.write(f"gpuwarden: warning: {printable(message, 1000)}\n")


@contextmanager
def progress(message: str, *, enabled: bool = True,
             delay_s: float = PROGRESS_DELAY_S) -> Iterator[None]:
    """A transient spinner on stderr while the block runs, shown only once it has run for
    `delay_s` and only when stderr is a terminal; nothing at all otherwise."""
    stream = sys.stderr
    if not enabled or not is_terminal(stream):
        yield
        return
    status = console_for(stream).status(printable(message, 200))
    timer = threading.Timer(delay_s, status.start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # a start already under way finishes before the stop below
        status.stop()


# ---------------------------------------------------------------------------- logging


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record is emitted (tests swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: IO[str]) -> None:
        pass


def configure_logging(level: str) -> None:
    """`--log-level`: how much this process logs to stderr. Provider SDKs log errors only, so a
    failed scan is one line; `debug` shows everything they log, and tracebacks."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)
    root.setLevel(level.upper())
    if level in ("debug", "info"):  # below WARNING Python's last-resort handler prints nothing
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    set_sdk_log_level(logging.DEBUG if level == "debug" else logging.ERROR)


def set_sdk_log_level(level: int) -> None:
    """The provider SDKs' loggers at `level` (NOTSET: they follow the root logger again)."""
    for name in SDK_LOGGERS:
        logging.getLogger(name).setLevel(level)


def debugging() -> bool:
    return logging.getLogger().isEnabledFor(logging.DEBUG)
