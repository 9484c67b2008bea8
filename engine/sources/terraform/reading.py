"""Reading a plan file: bytes within the bounds of `engine.inputfiles`, decoded and parsed.

Accepts UTF-8 with or without BOM, UTF-16/UTF-32 with BOM, and BOM-less UTF-16; recognises the
usual wrong files (a binary plan, gzip, the streamed log of `terraform plan -json`, a state
file) and says what to pass instead.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson

from engine.core.errors import InputError
from engine.inputfiles import read_input_bytes, tidy_document
from engine.sources.terraform.document import SHOW_JSON_HINT, check_plan_document


def read_plan(path: str) -> dict[str, Any]:
    """Read `terraform show -json` output from `path` ("-" for stdin) and check it is a plan.

    Accepts UTF-8 with or without BOM, UTF-16/UTF-32 with BOM, and BOM-less UTF-16. Every problem
    is an `InputError` naming the file (and line where JSON parsing gives one). The file is read
    and the document tidied within the bounds of `engine.inputfiles`.
    """
    display = "<stdin>" if path == "-" else path
    data = _read_bytes(path, display)
    document = _parse_plan_bytes(data, display)
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


def _parse_plan_bytes(data: bytes, display: str) -> Any:
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
    text = _decode_text(data, display)
    return _load_json(text, display)


def _decode_text(data: bytes, display: str) -> bytes | str:
    """UTF-8 stays bytes (orjson reads them directly); other encodings are decoded to str."""
    codec, skip = _detect_encoding(data, display)
    if codec == "utf-8":
        return data[skip:]
    try:
        return data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        raise InputError(f"not valid {codec.upper()} text: {exc.reason}", file=display) from None


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


def _load_json(text: bytes | str, display: str) -> Any:
    try:
        return tidy_document(orjson.loads(text), display, len(text), from_orjson=True)
    except orjson.JSONDecodeError:
        pass  # re-parse with json for a line number (or accept what only orjson rejects)
    if isinstance(text, bytes):
        data = text
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"not valid UTF-8 text (byte 0x{data[exc.start]:02x}); save the plan JSON as UTF-8",
                file=display,
                line=data[: exc.start].count(b"\n") + 1,
            ) from None
    try:
        document = json.loads(text)
    except RecursionError:
        raise InputError("not a Terraform plan: JSON nested too deeply", file=display) from None
    except json.JSONDecodeError as exc:
        raise _json_error(text, exc, display) from None
    except ValueError:  # the only other ValueError: an integer too long to convert
        raise InputError(f"invalid JSON: a number has more than {sys.get_int_max_str_digits()} "
                         "digits", file=display) from None
    return tidy_document(document, display, len(text), from_orjson=False)


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
