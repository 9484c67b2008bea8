"""Terminal table (rich): findings by dollar impact, a summary line and what to fix first.

Shows the MAX_ROWS costliest findings; the summary line always counts all of them.

`render()` returns plain text (no ANSI codes) for files, pipes and CI logs; a CLI writing to a
terminal can print `renderables()` to its own colour Console instead.
"""

from __future__ import annotations

from io import StringIO

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from engine.model import Finding
from engine.outputs import RenderContext
from engine.outputs.markdown import ReportView, build_view, format_usd

TABLE_WIDTH = 140
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


def render(ctx: RenderContext) -> str:
    buffer = StringIO()
    console = Console(
        file=buffer,
        width=TABLE_WIDTH,
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
    head = findings_table(view) if listed else Text("No findings.", style="green")
    parts: list[RenderableType] = [head]
    if listed > MAX_ROWS:
        parts.append(Text(TRUNCATION_NOTICE.format(count=listed - MAX_ROWS), style="dim"))
    parts += [Text(""), summary_line(view)]
    fixes = what_to_do(view)
    if fixes:
        parts += [Text(""), *fixes]
    return Group(*parts)


def findings_table(view: ReportView) -> Table:
    table = Table(title="gpuwarden findings", title_justify="left", expand=False)
    table.add_column("Severity", no_wrap=True)
    table.add_column("Policy", no_wrap=True)
    table.add_column("Resource", overflow="fold")
    table.add_column("Result", no_wrap=True)
    table.add_column("$/month", justify="right", no_wrap=True)
    table.add_column("Message", overflow="fold")
    for finding in _listed(view)[:MAX_ROWS]:
        table.add_row(*_row(finding))
    return table


def _listed(view: ReportView) -> tuple[Finding, ...]:
    return (*view.failing, *view.unknown, *view.passed)


def _row(finding: Finding) -> tuple[Text, ...]:
    """Cells as Text, never str: rich would read `[...]` in ids and messages as markup."""
    severity = str(finding.severity)
    return (
        Text(severity, style=SEVERITY_STYLES.get(severity, "")),
        Text(finding.policy),
        Text(f"{finding.resource.kind} {finding.resource.id}"),
        Text(finding.result, style=RESULT_STYLES.get(finding.result, "")),
        Text(format_usd(finding.estimated_monthly_usd)),
        Text(finding.message),
    )


def summary_line(view: ReportView) -> Text:
    s = view.summary
    return Text.assemble(
        (f"{s.failed} failing", "bold red" if s.failed else "green"),
        f", {s.unknown} unknown, {s.passed} passed on {s.resources} resources",
        " · estimated monthly waste ",
        (format_usd(s.estimated_monthly_usd), "bold"),
    )


def what_to_do(view: ReportView) -> list[Text]:
    if not view.top_fixes:
        return []
    lines = [Text("What to do first:", style="bold")]
    for rank, finding in enumerate(view.top_fixes, start=1):
        lines.append(
            Text(
                f"  {rank}. {view.title_of(finding)} on {finding.resource.id} "
                f"({format_usd(finding.estimated_monthly_usd)}/month): {view.fix_for(finding)}"
            )
        )
    return lines
