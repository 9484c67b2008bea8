"""Reading policy files and the files they name (budgets, Rego modules and data): regular
files only, within a size limit, with the reader every input file shares
(`engine.inputfiles.read_regular_file`: non-blocking, so a FIFO swapped in after the check
cannot hang it). Policy files: `MAX_POLICY_FILE_BYTES`, or `GPUWARDEN_MAX_POLICY_FILE_KB`.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.core.errors import InputError
from engine.inputfiles import FileTooLarge as FileTooLarge  # raised by read_bounded_bytes
from engine.inputfiles import NotRegularFile, read_regular_file

MAX_POLICY_FILE_BYTES = 2**20
MAX_POLICY_FILE_ENV = "GPUWARDEN_MAX_POLICY_FILE_KB"


def max_policy_file_bytes() -> int:
    setting = os.environ.get(MAX_POLICY_FILE_ENV, "").strip()
    if setting.isdigit() and 0 < len(setting) <= 7 and int(setting) > 0:
        return int(setting) * 1024
    return MAX_POLICY_FILE_BYTES


def read_bounded_bytes(path: Path, limit: int) -> bytes:
    """The bytes of a regular file (a FIFO or device would block or never end); `OSError` when
    it cannot be read, `FileTooLarge` when it has more than `limit` bytes."""
    return read_regular_file(path, limit)


def read_bounded_text(path: Path, shown: str, what: str, max_bytes: int | None = None) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes` (default: the policy file
    limit); every problem an `InputError` naming `shown`."""
    limit = max_policy_file_bytes() if max_bytes is None else max_bytes
    try:
        data = read_bounded_bytes(path, limit)
    except FileTooLarge:
        raise InputError(f"{what} is larger than {limit // 1024} KiB (the limit; raise it with "
                         f"{MAX_POLICY_FILE_ENV}=N)", file=shown) from None
    except OSError as exc:
        why = "not a regular file" if isinstance(exc, NotRegularFile) else exc.strerror or exc
        raise InputError(f"cannot read {what}: {why}", file=shown) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read {what}: not UTF-8 ({exc.reason} at byte {exc.start})",
                         file=shown) from None
