"""The `history` and `what-if` commands (registered on the CLI's app by engine/cli.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.core.errors import InputError, printable

if TYPE_CHECKING:
    from engine.core.evaluate import Engine
    from engine.core.model import Resource
    from engine.pipeline import ScanRequest, ScanResult

HistoryArg = Annotated[str, typer.Option("--history", metavar="URL", help="The run history: an "
                                         "SQLite file (sqlite:///path.db or a path) or "
                                         "s3://bucket/prefix/.")]
SinceOpt = Annotated[str | None, typer.Option(
    "--since", help="Only runs at or after this ISO 8601 instant.")]
FormatOpt = Annotated[str, typer.Option("--format", help="table or json.")]
HistoryFormatOpt = Annotated[str, typer.Option(
    "--format", help="table, json, or html (a self-contained page with the trend charts).")]
GroupByOpt = Annotated[str | None, typer.Option(
    "--group-by", help="team, account or policy: the trend per group (html: by policy unless "
    "given).")]


def history_cmd(history: HistoryArg, since: SinceOpt = None, fmt: HistoryFormatOpt = "table",
                group_by: GroupByOpt = None) -> None:
    """Spend, savings, unallocated spend and failing findings per recorded run; new, still
    open and fixed findings since the previous run; per team, account or policy."""
    from engine.history.groups import GROUP_DIMENSIONS, grouped_trend
    from engine.history.trend import render_grouped, render_trend, render_trend_html, trend
    from engine.history.urls import open_store

    _check_format(fmt, ("table", "json", "html"))
    if group_by is not None and group_by not in GROUP_DIMENSIONS:
        raise InputError(f"--group-by: {printable(group_by)!r} is not one of "
                         f"{', '.join(GROUP_DIMENSIONS)}")
    runs = open_store(history).runs(_since(since))
    dimension = group_by or ("policy" if fmt == "html" else None)
    grouped = grouped_trend(runs, dimension, _catalog_engine(dimension)) if dimension else []
    if fmt == "html":
        _print(render_trend_html(trend(runs), grouped, dimension or "policy"))
    elif dimension:
        _print(render_grouped(grouped, dimension, fmt))
    else:
        _print(render_trend(trend(runs), fmt))


def _catalog_engine(dimension: str | None) -> Engine | None:
    """The built-in engine, whose catalog reads and prices a recorded snapshot's resources
    (grouping by team or account needs them)."""
    if dimension not in ("team", "account"):
        return None
    from engine.pipeline import build_engine

    return build_engine(None)


def html_extras(fmt: str, resources: Iterable[Resource], engine: object,
                history: str | None) -> dict[str, Any] | None:
    """For `--format html`, the RenderContext fields beyond the report: the scanned resources'
    teams and spend, and the trend of the history the run was recorded in."""
    if fmt != "html":
        return None
    from engine.core.evaluate import Engine
    from engine.history.trend import trend
    from engine.history.urls import open_store
    from engine.outputs.html import report_extras

    assert isinstance(engine, Engine)
    rows = trend(open_store(history).runs()) if history is not None else []
    return report_extras(resources, engine.catalog, rows)


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

    _check_format(fmt, ("table", "json"))
    engine = build_engine(policies)
    runs = open_store(history).runs(_since(since))
    _print(render_whatif(replay(runs, engine, max_actions), fmt))


def _check_format(fmt: str, formats: tuple[str, ...]) -> None:
    if fmt not in formats:
        raise InputError(f"--format: {printable(fmt)!r} is not one of {', '.join(formats)}")


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


def notify_known(url: str | None, notify: list[str] | None, now: datetime,
                 warn: Callable[[str], None]) -> frozenset[str] | None:
    """`scan --history URL --notify ...`: "new" is new since the last run recorded there."""
    if url is None or not notify:
        return None
    from engine.history.last_run import known_from_history

    return known_from_history(url, now, warn)
