"""Input documents (Terraform plans, snapshot bundles) read within bounds.

Hostile input is normal input, so every file is read the same way:

- **Regular files only.** A FIFO would block the read forever and `/dev/zero` never ends; the
  path is checked with `stat` before it is opened, opened non-blocking, and checked again on the
  open descriptor (it may have been swapped in between). `-` reads standard input.
- **A size cap**, `DEFAULT_MAX_INPUT_MB` unless `GPUWARDEN_MAX_INPUT_MB` says otherwise; never
  more than the cap is read, even from a file that grows while it is read.
- **One reader for every input file**: `read_regular_file` does the above for plans and
  snapshots here, and for policy files, Rego modules, data documents and budgets files
  (`engine.core.yamltext`, with the smaller policy file cap).
- **Parsed documents are tidied once** (`tidy_document`), so nothing downstream meets what JSON
  and YAML allow but outputs cannot hold: nesting deeper than `MAX_DEPTH`, YAML aliases that
  expand far beyond the file, lone surrogates (replaced with U+FFFD), integers beyond 64 bits
  (read as floats, as orjson reads them), YAML-only types (binary, sets).
- **Identifiers are capped** (`identifier`): ids, names and addresses shown in reports are one
  line of at most `MAX_IDENTIFIER` characters.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import sys
from datetime import date, datetime
from typing import Any

from engine.core.errors import InputError, printable
from engine.core.model import Resource

DEFAULT_MAX_INPUT_MB = 256
MAX_INPUT_ENV = "GPUWARDEN_MAX_INPUT_MB"
# Real plans and bundles nest about 25 deep; orjson writes reports only up to 255 levels.
MAX_DEPTH = 128
# Values a document may expand to (YAML aliases repeat a subtree): per byte of its text, plus a
# floor for tiny files. Plain JSON and YAML need at most one value per byte.
EXPANSION_PER_BYTE = 10
EXPANSION_FLOOR = 100_000
MAX_IDENTIFIER = 512
# Resource fields that name or place a resource: shown in every report format.
IDENTIFIER_FIELDS = ("provider", "kind", "id", "name", "region", "account", "cluster",
                     "namespace", "instance_type", "owner", "checkpoint_uri")
_INT_RANGE = (-(2**63), 2**64 - 1)
_SURROGATES = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SCALARS = (str, bool, int, float, type(None), datetime, date)
_PLAIN_CONTAINERS = (dict, list)
_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def max_input_bytes() -> int:
    """The size cap on one input file, from `GPUWARDEN_MAX_INPUT_MB` (MiB, a whole number)."""
    setting = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not setting:
        return DEFAULT_MAX_INPUT_MB * 2**20
    if not setting.isdigit() or int(setting) < 1 or len(setting) > 7:
        raise InputError(f"{MAX_INPUT_ENV} must be a whole number of MiB between 1 and 9999999, "
                         f"found {printable(setting, 40)!r}")
    return int(setting) * 2**20


class FileTooLarge(ValueError):
    """A file with more than `limit` bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit // 1024} KiB")
        self.limit = limit


class NotRegularFile(OSError):
    """A path that is a directory, FIFO, device or socket; `kind` says which ("a FIFO")."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(f"{path}: not a regular file")
        self.kind = kind


def read_regular_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at `path`: at most `limit` of them, never blocking.

    Raises `NotRegularFile` for anything but a regular file (checked before the open, which is
    non-blocking, and again on the open descriptor), `FileTooLarge` past `limit`, and `OSError`
    when the file cannot be read.
    """
    _check_regular(os.stat(path).st_mode, path)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(descriptor, "rb") as stream:
        status = os.fstat(stream.fileno())
        _check_regular(status.st_mode, path)
        if status.st_size > limit:
            raise FileTooLarge(limit)
        # Sized to the file (a buffer of the whole cap would be allocated first), and read on
        # should the file have grown since.
        data = stream.read(status.st_size + 1)
        if len(data) > status.st_size:
            data += stream.read(limit + 1 - len(data))
    if len(data) > limit:
        raise FileTooLarge(limit)
    return data


def _check_regular(mode: int, path: str | os.PathLike[str]) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise NotRegularFile(path, "a directory")
    raise NotRegularFile(path, next((name for test, name in _FILE_KINDS if test(mode)),
                                    "a special file"))


def read_input_bytes(path: str, what: str, display: str | None = None, *,
                     stdin: bool = False) -> bytes:
    """The bytes of `path`, a regular file within the size cap; with `stdin`, "-" reads
    standard input (within the cap too).

    `what` names the input in errors ("plan", "snapshot"). OS errors (no such file, permission
    denied, a directory) are raised as `OSError` for the caller to word; everything else this
    module refuses is an `InputError`.
    """
    display = display or path
    limit = max_input_bytes()
    if stdin and path == "-":
        return _read_stdin(limit, what, display)
    try:
        return read_regular_file(path, limit)
    except NotRegularFile as exc:
        if exc.kind == "a directory":
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path) from None
        hint = "; pass - to read standard input" if stdin else ""
        raise InputError(f"cannot read {what}: this is {exc.kind}, not a regular file{hint}",
                         file=display) from None
    except FileTooLarge:
        raise _too_large(what, display, limit) from None


def _read_stdin(limit: int, what: str, display: str) -> bytes:
    if sys.stdin is None:  # started with standard input closed
        raise InputError(f"cannot read {what}: standard input is closed", file=display)
    return _within_cap(sys.stdin.buffer.read(limit + 1), limit, what, display)


def _within_cap(data: bytes, limit: int, what: str, display: str) -> bytes:
    if len(data) > limit:
        raise _too_large(what, display, limit)
    return data


def _too_large(what: str, display: str, limit: int) -> InputError:
    return InputError(f"{what} is larger than {limit // 2**20} MiB (raise the limit with "
                      f"{MAX_INPUT_ENV}=N)", file=display)


# --------------------------------------------------------------------------------------------
# Parsed documents
# --------------------------------------------------------------------------------------------


def tidy_document(document: Any, file: str, size: int, *, from_orjson: bool = False) -> Any:
    """`document` (parsed JSON or YAML of `size` bytes) made safe to evaluate and print: see the
    module docstring. Containers are fixed in place; the (possibly replaced) root is returned.

    orjson already refuses lone surrogates and reads big integers as floats, so a document it
    parsed (`from_orjson`) only has its nesting checked, which is several times faster.
    Raises `InputError` naming `file` for nesting deeper than `MAX_DEPTH`, aliases expanding
    beyond the file's size, or values JSON cannot hold.
    """
    if from_orjson:
        check_nesting(document, file)
        return document
    budget = EXPANSION_FLOOR + EXPANSION_PER_BYTE * size
    holder = [document]
    # (container, key, depth): the value at container[key] still to be tidied
    pending: list[tuple[Any, Any, int]] = [(holder, 0, 1)]
    while pending:
        container, key, depth = pending.pop()
        budget -= 1
        if budget < 0:
            raise InputError("document expands far beyond its size (YAML aliases?)", file=file)
        value = container[key]
        if isinstance(value, str):
            if not value.isascii():
                container[key] = without_surrogates(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
                container[key] = _as_float(value)
        elif isinstance(value, dict | list | tuple):
            if depth > MAX_DEPTH:
                raise _too_deep(file)
            pending.extend(_children(container, key, value, depth))
        elif not isinstance(value, _SCALARS):
            raise InputError(f"unsupported value of type {type(value).__name__} (JSON values "
                             "only)", file=file)
    return holder[0]


def json_int(text: str) -> int | float:
    """An integer literal of JSON text (`json.loads(parse_int=...)`) as `tidy_document` leaves
    it: beyond 64 bits, a float. Past Python's digit limit it raises `ValueError`."""
    value = int(text)
    return value if _INT_RANGE[0] <= value <= _INT_RANGE[1] else _as_float(value)


def tidy_json(document: Any, text: str, file: str) -> Any:
    """`document`, parsed from JSON `text` with `json_int` for integers, tidied as
    `tidy_document` would. JSON cannot expand, and its only way to a lone surrogate is a
    `\\uD800`-style escape (decoding the file's bytes was strict), so without one of those in
    the text only the nesting needs a walk."""
    if _SURROGATE_ESCAPE.search(text):
        return tidy_document(document, file, len(text))
    check_nesting(document, file)
    return document


def check_nesting(document: Any, file: str) -> None:
    """Raise `InputError` when `document` (plain dicts and lists, as orjson builds them) nests
    containers more than `MAX_DEPTH` deep. Level by level, testing exact types: the fastest
    walk in Python, about 10 ms per MB of JSON."""
    level = [document] if type(document) in _PLAIN_CONTAINERS else []
    for _ in range(MAX_DEPTH):
        below: list[Any] = []
        for node in level:
            values = node.values() if type(node) is dict else node
            below.extend([value for value in values if type(value) in _PLAIN_CONTAINERS])
        if not below:
            return
        level = below
    raise _too_deep(file)


def _too_deep(file: str) -> InputError:
    return InputError(f"nested more than {MAX_DEPTH} levels deep", file=file)


def _children(container: Any, key: Any, value: Any, depth: int) -> list[tuple[Any, Any, int]]:
    if isinstance(value, tuple):  # YAML !!pairs and !!omap
        value = container[key] = list(value)
    if isinstance(value, list):
        return [(value, index, depth + 1) for index in range(len(value))]
    if any(isinstance(k, str) and not k.isascii() for k in value):
        _fix_keys(value)
    return [(value, k, depth + 1) for k in value]


def _fix_keys(mapping: dict[Any, Any]) -> None:
    items = list(mapping.items())
    mapping.clear()
    for k, v in items:
        mapping.setdefault(without_surrogates(k) if isinstance(k, str) else k, v)


def without_surrogates(text: str) -> str:
    """`text` with lone surrogates (JSON allows `"\\ud800"`; UTF-8 cannot hold it) as U+FFFD."""
    return _SURROGATES.sub("\ufffd", text)


def _as_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


# --------------------------------------------------------------------------------------------
# Identifiers
# --------------------------------------------------------------------------------------------


def identifier(text: str, limit: int = MAX_IDENTIFIER) -> str:
    """`text` as a report shows an id, name or address: one line of at most `limit` characters.

    Control characters become visible placeholders; a longer text keeps its start and ends with
    an ellipsis and a digest of the whole, so two long ids that share a start stay distinct.
    Idempotent: an identifier is its own identifier.
    """
    if len(text) <= limit and text.isprintable():
        return text
    head = printable(text[:limit], limit)
    if len(text) <= limit:
        return head
    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:8]
    return f"{head[: limit - 10]}…{digest}"


def bounded_resource(resource: Resource) -> Resource:
    """`resource` with its `IDENTIFIER_FIELDS` as identifiers (unchanged when they already are)."""
    changed: dict[str, str] = {}
    for field in IDENTIFIER_FIELDS:
        value = getattr(resource, field)
        shown = identifier(value) if isinstance(value, str) else value
        if shown != value:
            changed[field] = shown
    return resource.model_copy(update=changed) if changed else resource
