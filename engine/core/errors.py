"""Errors that reach the user as one clear line (CLI exit code 2), and how such a line shows
text it did not write (paths, addresses, exception messages): on one line, bounded."""

from __future__ import annotations

import unicodedata

# user input echoed in an error line (a path, an option value) is cut to this many characters
ECHO_LIMIT = 200
# a whole error line, whatever it quotes
LINE_LIMIT = 1000
PROJECT_GIT_URL = "git+https://github.com/gpuwarden/gpuwarden"
# line breaks and tabs read as a space; other control, format (bidi overrides) and lone
# surrogate characters as '?', so a crafted input can neither start a spoofed second line nor
# reorder or hide what follows it
_SPACES = frozenset("\t\n\v\f\r\x1c\x1d\x1e\x85\u2028\u2029")
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


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
        shown = printable(self.file, ECHO_LIMIT)
        where = shown if self.line is None else f"{shown}:{self.line}"
        return f"{where}: {self.message}"


def printable(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` as one terminal line: control characters replaced, at most `limit` characters
    (an ellipsis marks a cut)."""
    cleaned = "".join(_visible(char) for char in text[: limit + 1])
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def _visible(char: str) -> str:
    if char in _SPACES:
        return " "
    return "?" if unicodedata.category(char) in _HIDDEN_CATEGORIES else char


def install_hint(extra: str) -> str:
    """How to install an optional extra; gpuwarden is installed from a checkout or git, not
    from a package index."""
    return (f"pip install -e '.[{extra}]' in a gpuwarden checkout, or "
            f"pip install 'gpuwarden[{extra}] @ {PROJECT_GIT_URL}'")
