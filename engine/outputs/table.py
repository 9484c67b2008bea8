"""Terminal table (rich): findings by dollar impact, a summary line and what to fix first.

Shows the MAX_ROWS costliest findings; the summary line always counts all of them. The
enforcement column says which rows can fail the check: only `deny` findings gate the exit code.

`render()` returns plain text (no ANSI codes) for files, pipes and CI logs, `ctx.width` columns
wide (DEFAULT_WIDTH when unset); a CLI writing to a terminal can print `renderables()` to its own
colour Console of the terminal's width instead. Long ids and messages wrap inside their cells.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from io import StringIO

from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from engine.core.model import Finding
from engine.outputs import RenderContext
from engine.outputs.actions import figure
from engine.outputs.markdown import ReportView, build_view

DEFAULT_WIDTH = 120
# rich lays out about 1,500 rows a second; past this a terminal table is unreadable anyway
MAX_ROWS = 200
TRUNCATION_NOTICE = "… {count} more findings not shown; use --format json or html for all of them"
SEVERITY_STYLES = {
    "critical": "bold white on red",
    "high": "bold red",
    "medium": "yellow",
    "low": "cyan",
    "info": "dim",
}
RESULT_STYLES = {"fail": "red", "unknown": "magenta", "pass": "green"}
ENFORCEMENT_STYLES = {"deny": "bold red", "warn": "yellow", "audit": "dim"}
# (header, justify); the short columns are as wide as their longest cell
COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("Severity", "left"), ("Enforce", "left"), ("Policy", "left"), ("Resource", "left"),
    ("Result", "left"), ("$/month", "right"), ("Message", "left"))
POLICY, RESOURCE, MESSAGE = 2, 3, 6
ACCOUNT_COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("Provider", "left"), ("Account", "left"), ("Failing", "right"), ("Unknown", "right"),
    ("Savings $/month", "right"))
SHORT_COLUMNS = (0, 1, 4, 5)
MIN_FLEX_WIDTH = 8
GATE_NOTE = "Only deny findings fail the check (exit code 1); warn and audit ones are advice."


def render(ctx: RenderContext) -> str:
    buffer = StringIO()
    console = Console(
        file=buffer,
        width=ctx.width or DEFAULT_WIDTH,
        color_system=None,
        force_terminal=False,
        no_color=True,
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )
    console.print(renderables(ctx))
    # rich pads the title and lines to the console width; trailing blanks only add noise
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def renderables(ctx: RenderContext) -> RenderableType:
    view = build_view(ctx)
    listed = len(_listed(view))
    if listed:
        head: RenderableType = findings_table(view, ctx.width or DEFAULT_WIDTH)
    else:
        head = Text("No findings.", style="green")
    parts: list[RenderableType] = [head]
    if listed > MAX_ROWS:
        parts.append(Text(TRUNCATION_NOTICE.format(count=listed - MAX_ROWS), style="dim"))
    if listed and any(f.enforcement != "deny" for f in _listed(view)):
        parts.append(Text(GATE_NOTE, style="dim"))
    parts += [Text(""), summary_line(view)]
    if view.accounts:
        parts += [Text(""), accounts_table(view)]
    fixes = what_to_do(view)
    if fixes:
        parts += [Text(""), *fixes]
    return Group(*parts)


def findings_table(view: ReportView, width: int = DEFAULT_WIDTH) -> Table:
    rows = [_row(finding) for finding in _listed(view)[:MAX_ROWS]]
    widths = column_widths(rows, width)
    table = Table(title="gpuwarden findings", title_justify="left", expand=False)
    for (header, justify), column_width in zip(COLUMNS, widths, strict=True):
        # ids have no spaces to break at: fold them anywhere rather than widen the table
        table.add_column(header, justify=justify, width=column_width, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def column_widths(rows: list[tuple[Text, ...]], width: int) -> list[int]:
    """Widths that fit `width`: the short columns as wide as their longest cell, then the policy
    column up to a third of what is left, then resource and message share the rest 2:3, each
    no wider than its longest cell."""
    natural = [max([len(header), *(cell.cell_len for cell in column)])
               for (header, _), column in zip(COLUMNS, zip(*rows, strict=True), strict=True)]
    fixed = sum(natural[i] for i in SHORT_COLUMNS)
    flexible = max(width - fixed - 3 * len(COLUMNS) - 1, 3 * MIN_FLEX_WIDTH)
    policy = min(natural[POLICY], max(MIN_FLEX_WIDTH, flexible // 3))
    resource, message = _share(flexible - policy, natural[RESOURCE], natural[MESSAGE])
    return [policy if i == POLICY else resource if i == RESOURCE else message if i == MESSAGE
            else natural[i] for i in range(len(COLUMNS))]


def _share(space: int, resource: int, message: int) -> tuple[int, int]:
    """Split `space` 2:3 between resource and message; what one does not need goes to the
    other."""
    resource_share = max(MIN_FLEX_WIDTH, space * 2 // 5)
    if resource <= resource_share:
        return resource, min(message, max(MIN_FLEX_WIDTH, space - resource))
    if message <= space - resource_share:
        return min(resource, max(MIN_FLEX_WIDTH, space - message)), message
    return resource_share, max(MIN_FLEX_WIDTH, space - resource_share)


def _listed(view: ReportView) -> tuple[Finding, ...]:
    return (*view.failing, *view.unknown, *view.passed)


def _row(finding: Finding) -> tuple[Text, ...]:
    """Cells as Text, never str: rich would read `[...]` in ids and messages as markup."""
    severity = str(finding.severity)
    return (
        Text(severity, style=SEVERITY_STYLES.get(severity, "")),
        Text(finding.enforcement, style=ENFORCEMENT_STYLES.get(finding.enforcement, "")),
        Text(finding.policy),
        _resource_cell(finding),
        Text(finding.result, style=RESULT_STYLES.get(finding.result, "")),
        Text(figure(finding)),
        Text(finding.message),
    )


def _resource_cell(finding: Finding) -> Text:
    """The id, after its kind unless the id already names it (a plan address, `Kind/ns/name`)."""
    kind, resource_id = finding.resource.kind, finding.resource.id
    if kind in re.split(r"[./]", resource_id):
        return Text(resource_id)
    return Text.assemble((kind, "dim"), " ", resource_id)


def summary_line(view: ReportView) -> Text:
    s = view.summary
    return Text.assemble(
        (f"{s.failed} failing", "bold red" if s.failed else "green"),
        f", {s.unknown} unknown, {s.passed} passed on {s.resources} resources",
        "\n", (view.money, "bold"),
    )


def accounts_table(view: ReportView) -> Table:
    """Failing and unknown findings per account, most savings first (`--organization`)."""
    table = Table(title="By account", title_justify="left", expand=False)
    for header, justify in ACCOUNT_COLUMNS:
        table.add_column(header, justify=justify, overflow="fold")
    for row in view.accounts:
        table.add_row(Text(row.provider), Text(row.account), str(row.failing), str(row.unknown),
                      f"${row.savings_usd:,.2f}")
    return table


def what_to_do(view: ReportView) -> list[RenderableType]:
    """The top fixes by what they save, numbered (a long one wraps under its own text, not
    under the number); then spend with no owner, apart."""
    parts: list[RenderableType] = []
    if view.actions:
        parts += [Text("What to do first:", style="bold"),
                  _numbered(a.text + (f" ({a.other_id})" if a.other_id else "")
                            for a in view.actions)]
    if view.unowned:
        if parts:
            parts.append(Text(""))
        parts += [Text("Spend with no owner (not a saving; tag it):", style="bold"),
                  _numbered(a.text for a in view.unowned)]
    return parts


def _numbered(lines: Iterable[str]) -> Table:
    steps = Table.grid(padding=(0, 1))
    steps.add_column(justify="right", width=4, no_wrap=True)
    steps.add_column(overflow="fold")
    for rank, line in enumerate(lines, start=1):
        steps.add_row(f"{rank}.", Text(line))
    return steps
