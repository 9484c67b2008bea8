"""The `history` and `what-if` commands (registered on the CLI's app by engine/cli.py)."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from engine.core.errors import InputError, printable

if TYPE_CHECKING:
    from engine.pipeline import ScanRequest, ScanResult

HistoryArg = Annotated[str, typer.Option("--history", metavar="URL", help="The run history: an "
                                         "SQLite file (sqlite:///path.db or a path) or "
                                         "s3://bucket/prefix/.")]
SinceOpt = Annotated[str | None, typer.Option(
    "--since", help="Only runs at or after this ISO 8601 instant.")]
FormatOpt = Annotated[str, typer.Option("--format", help="table or json.")]


def history_cmd(history: HistoryArg, since: SinceOpt = None, fmt: FormatOpt = "table") -> None:
    """Spend, savings, unallocated spend and failing findings per recorded run; new, still
    open and fixed findings since the previous run."""
    from engine.history.trend import render_trend, trend
    from engine.history.urls import open_store

    _check_format(fmt)
    runs = open_store(history).runs(_since(since))
    _print(render_trend(trend(runs), fmt))


def what_if_cmd(
    history: HistoryArg,
    policies: Annotated[list[str] | None, typer.Option(
        "--policies", help="Candidate policy files, directories or overrides (repeatable); "
        "'builtin' is the built-in pack.")] = None,
    since: SinceOpt = None,
    max_actions: Annotated[int, typer.Option(
        "--max-actions", min=0, help="Most actions one run would have taken.")] = 10,
    fmt: FormatOpt = "table",
) -> None:
    """Replay the recorded snapshots with candidate policies (dry-run): what would have failed,
    the dollars, the actions, beside what each recorded run found."""
    from engine.history.urls import open_store
    from engine.history.whatif import render_whatif, replay
    from engine.pipeline import build_engine

    _check_format(fmt)
    engine = build_engine(policies)
    runs = open_store(history).runs(_since(since))
    _print(render_whatif(replay(runs, engine, max_actions), fmt))


def _check_format(fmt: str) -> None:
    if fmt not in ("table", "json"):
        raise InputError(f"--format: {printable(fmt)!r} is not one of table, json")


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")


def _since(text: str | None) -> datetime | None:
    from engine.pipeline import parse_instant

    try:
        return None if text is None else parse_instant(text)
    except InputError:
        raise InputError(f"--since: not an ISO 8601 instant: {printable(text or '')!r}") from None


def record_scan(url: str, request: ScanRequest, result: ScanResult) -> None:
    """`scan --history URL`: the rendered JSON report and the snapshot `--save-snapshot`
    would write."""
    from engine.history.record import collected_snapshot, record_run
    from engine.pipeline import render_report

    record_run(url, at=request.now, command="scan", source=",".join(request.sources),
               report_json=render_report(result.report, "json", result.engine),
               snapshot=collected_snapshot(result.collected, request.now))
