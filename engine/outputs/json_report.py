"""The versioned JSON report (`gpuwarden.report/v1`), exactly the Report model's JSON form.

The findings are serialized one at a time and spliced into the rest of the report, so a large
report never exists as one tree of dicts next to its text: the text is the same as dumping
`report.to_json_dict()` whole with two-space indentation (tests/test_snapshot_scale.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import orjson

from engine.core.errors import InputError
from engine.core.model import Finding, Report
from engine.outputs import RenderContext

_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
_EMPTY_FINDINGS = b'\n  "findings": [],'
_ITEM_INDENT = b"\n    "  # a finding is an item of a list one level below the report


def render(ctx: RenderContext) -> str:
    text = bytearray()
    for chunk in report_chunks(ctx.report):
        text += chunk
    return text.decode("utf-8")


def write_report(ctx: RenderContext, stream: BinaryIO) -> None:
    """`render(ctx)` encoded as UTF-8 into `stream`, a piece at a time."""
    for chunk in report_chunks(ctx.report):
        stream.write(chunk)


def write_file(ctx: RenderContext, path: Path) -> None:
    """`render(ctx)` into the file at `path` (`-o`), without the whole text in memory."""
    try:
        with path.open("wb") as stream:
            write_report(ctx, stream)
    except OSError as exc:
        raise InputError(f"cannot write report: {exc.strerror or exc}", file=str(path)) from None


def report_chunks(report: Report) -> Iterator[bytes]:
    """The report's JSON text with its final newline, in pieces: what comes before the
    findings, each finding, what comes after."""
    shell = orjson.dumps(report.model_copy(update={"findings": []}).to_json_dict(),
                         option=_OPTIONS)
    head, found, tail = shell.partition(_EMPTY_FINDINGS)
    if not report.findings or not found:  # (a changed layout: dump whole rather than guess)
        yield orjson.dumps(report.to_json_dict(), option=_OPTIONS) + b"\n"
        return
    yield head + b'\n  "findings": ['
    separator = b"\n    "
    for finding in report.findings:
        yield separator + _finding_text(finding)
        separator = b",\n    "
    yield b"\n  ]," + tail + b"\n"


def _finding_text(finding: Finding) -> bytes:
    text: bytes = orjson.dumps(finding.model_dump(mode="json", by_alias=True, exclude_none=False),
                               option=_OPTIONS)
    return text.replace(b"\n", _ITEM_INDENT)
