"""Errors that reach the user as one clear line (CLI exit code 2)."""

from __future__ import annotations


class InputError(Exception):
    """Bad input: an unreadable plan, an invalid policy, a malformed snapshot.

    `str()` is the one line the user sees: `file:line: what is wrong`.
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        self.message = message
        self.file = file
        self.line = line
        super().__init__(self.__str__())

    def __str__(self) -> str:
        if self.file is None:
            return self.message
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"
