"""Reading a plan file: bytes within the bounds of `engine.inputfiles`, decoded and parsed.

Accepts UTF-8 with or without BOM, UTF-16/UTF-32 with BOM, and BOM-less UTF-16; recognises the
usual wrong files (a binary plan, gzip, the streamed log of `terraform plan -json`, a state
file) and says what to pass instead.
"""

from __future__ import annotations

import json
import re
import sys
from json.scanner import make_scanner
from typing import Any, cast

from engine.core.errors import InputError
from engine.inputfiles import check_nesting, json_int, read_input_bytes, tidy_json
from engine.sources.terraform.document import (
    NORMALIZED_KEYS,
    SHOW_JSON_HINT,
    check_plan_document,
)

_WHITESPACE = re.compile(r"[ \t\n\r]*")


def read_plan(path: str, *, whole: bool = True) -> dict[str, Any]:
    """Read `terraform show -json` output from `path` ("-" for stdin) and check it is a plan.

    Accepts UTF-8 with or without BOM, UTF-16/UTF-32 with BOM, and BOM-less UTF-16. Every problem
    is an `InputError` naming the file (and line where JSON parsing gives one). The file is read
    and the document tidied within the bounds of `engine.inputfiles`.

    With `whole=False`, only the top-level keys the normalizers read (`NORMALIZED_KEYS`) keep
    their values; the others (`planned_values`, `prior_state`: a third of a big plan) are
    parsed, checked and dropped as soon as read, and stay as keys whose value is None.
    """
    display = "<stdin>" if path == "-" else path
    # The bytes are dropped once decoded and the text once parsed: a big plan's memory is its
    # parsed document, not three copies of it.
    text = _plan_text(_read_bytes(path, display), display)
    document = _load_json(text, display, None if whole else NORMALIZED_KEYS)
    del text
    check_plan_document(document, display)
    plan: dict[str, Any] = document
    return plan


def _read_bytes(path: str, display: str) -> bytes:
    try:
        return read_input_bytes(path, "plan", display, stdin=True)
    except FileNotFoundError:
        raise InputError("cannot read plan: no such file", file=display) from None
    except IsADirectoryError:
        raise InputError(
            "cannot read plan: this is a directory, expected a plan JSON file", file=display
        ) from None
    except PermissionError:
        raise InputError("cannot read plan: permission denied", file=display) from None
    except OSError as exc:
        raise InputError(f"cannot read plan: {exc.strerror or exc}", file=display) from None


def _plan_text(data: bytes, display: str) -> str:
    """The plan's text, after the checks for the usual wrong files."""
    if not data.strip(b" \t\r\n\x00\xef\xbb\xbf\xff\xfe"):
        raise InputError(
            "empty file; expected the output of `terraform show -json PLAN`", file=display
        )
    if data.startswith(b"PK\x03\x04"):
        raise InputError(
            "this is a binary plan; run `terraform show -json PLAN > plan.json` and pass plan.json",
            file=display,
        )
    if data.startswith(b"\x1f\x8b"):
        raise InputError("this is a gzip-compressed file, not plan JSON", file=display)
    return _decode_text(data, display)


def _decode_text(data: bytes, display: str) -> str:
    codec, skip = _detect_encoding(data, display)
    try:
        # utf-8-sig drops the BOM without copying the bytes first
        return data.decode("utf-8-sig") if codec == "utf-8" else data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        if codec != "utf-8":
            raise InputError(f"not valid {codec.upper()} text: {exc.reason}",
                             file=display) from None
        at = skip + exc.start  # utf-8-sig counts from after the BOM
        raise InputError(
            f"not valid UTF-8 text (byte 0x{data[at]:02x}); save the plan JSON as UTF-8",
            file=display,
            line=data[:at].count(b"\n") + 1,
        ) from None


def _detect_encoding(data: bytes, display: str) -> tuple[str, int]:
    boms = (
        (b"\xff\xfe\x00\x00", "utf-32-le"),
        (b"\x00\x00\xfe\xff", "utf-32-be"),
        (b"\xef\xbb\xbf", "utf-8"),
        (b"\xff\xfe", "utf-16-le"),
        (b"\xfe\xff", "utf-16-be"),
    )
    for bom, codec in boms:
        if data.startswith(bom):
            return codec, len(bom)
    if b"\x00" not in data[:4096]:
        return "utf-8", 0
    # JSON starts with an ASCII character, so a BOM-less UTF-16 file has a NUL in one byte of
    # the first pair.
    if len(data) >= 2 and data[0] == 0 and data[1] != 0:
        return "utf-16-be", 0
    if len(data) >= 2 and data[0] != 0 and data[1] == 0:
        return "utf-16-le", 0
    raise InputError("this is a binary file, not plan JSON; " + SHOW_JSON_HINT, file=display)


def _load_json(text: str, display: str, keep: frozenset[str] | None = None) -> Any:
    """Parsed with the standard library, not orjson: orjson holds a copy of the text and a tree
    of its own while it builds the objects, about 50 MB more at the peak of a 21 MB plan
    (bench/bench_check_plan.py), to save a few percent of the time. `keep`: see `_load_keys`."""
    try:
        document = _load_keys(text, keep, display) if keep is not None else None
        if document is None:
            document = json.loads(text, parse_int=json_int)
    except RecursionError:
        raise InputError("not a Terraform plan: JSON nested too deeply", file=display) from None
    except json.JSONDecodeError as exc:
        raise _json_error(text, exc, display) from None
    except ValueError:  # the only other ValueError: an integer too long to convert
        raise InputError(f"invalid JSON: a number has more than {sys.get_int_max_str_digits()} "
                         "digits", file=display) from None
    return tidy_json(document, text, display)


def _load_keys(text: str, keep: frozenset[str], display: str) -> dict[str, Any] | None:
    """The top-level object of `text` with the values of keys outside `keep` replaced by None
    once parsed and checked for nesting, so a big unread part never sits in memory beside the
    rest. None when `text` is not a well-formed JSON object (`json.loads` then says why)."""
    scan = make_scanner(cast(Any, json.JSONDecoder(parse_int=json_int)))  # what loads() uses
    document: dict[str, Any] = {}
    try:
        end = _expect(text, 0, "{")
        closed = text.startswith("}", _skip(text, end))
        while not closed:
            key, end = scan(text, _expect(text, end, '"') - 1)
            if not isinstance(key, str):
                raise _NotJSON
            value, end = scan(text, _skip(text, _expect(text, end, ":")))
            if key not in keep:
                check_nesting([value], display)  # one level down, as it was in the document
                value = None
            document[key] = value
            end = _skip(text, end)
            closed = text.startswith("}", end)
            if not closed:
                end = _expect(text, end, ",")
    except (StopIteration, ValueError, RecursionError, _NotJSON):
        return None
    return document if _skip(text, _expect(text, end, "}")) == len(text) else None


class _NotJSON(Exception):
    """Text that does not follow JSON's grammar where `_load_keys` reads it."""


def _skip(text: str, start: int) -> int:
    """The position of the first character at or after `start` that is not JSON whitespace."""
    found = _WHITESPACE.match(text, start)
    return found.end() if found else start


def _expect(text: str, start: int, token: str) -> int:
    """The position after `token`, the first character after `start` that is not whitespace."""
    at = _skip(text, start)
    if not text.startswith(token, at):
        raise _NotJSON
    return at + 1


def _json_error(text: str, exc: json.JSONDecodeError, display: str) -> InputError:
    if exc.msg == "Extra data" and _is_streamed_plan_log(text):
        return InputError(
            "this is the streamed log of `terraform plan -json`, not a plan; save a plan with "
            "`terraform plan -out=PLAN` and " + SHOW_JSON_HINT,
            file=display,
        )
    if exc.pos >= len(text.rstrip()):
        return InputError(
            f"invalid JSON: unexpected end of file (is it truncated?): {exc.msg}",
            file=display,
            line=exc.lineno,
        )
    return InputError(
        f"invalid JSON: {exc.msg} (column {exc.colno})", file=display, line=exc.lineno
    )


def _is_streamed_plan_log(text: str) -> bool:
    first_line = text.lstrip("\ufeff").split("\n", 1)[0]
    try:
        first = json.loads(first_line)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(first, dict) and ("@level" in first or "@message" in first)
