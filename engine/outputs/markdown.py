"""Markdown PR comment, rendered with jinja2 and kept under the comment size budget.

Also home of the report view (ordering, grouping, headline numbers) that the table and HTML
reporters share, so all human-facing outputs tell the same story in the same order.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.core.evaluate import combined_savings, largest_per_resource, savings_total
from engine.core.model import Finding, Report, ResourceRef, Severity, SourceLocation, Summary
from engine.outputs import PolicyMeta, RenderContext
from engine.outputs.accounts import AccountRow, account_rows
from engine.outputs.actions import Action, figure, first_actions, money_line, unowned

if TYPE_CHECKING:
    import jinja2

TEMPLATES_DIR = Path(__file__).parent / "templates"
MARKDOWN_TEMPLATE = "pr_comment.md.j2"
TOP_FIXES = 3
TRUNCATION_NOTICE = "… {count} more findings not shown; see the full report"
MIN_ROW_CHARS = 30  # no table row renders shorter: bounds the rows that can possibly fit


# ---------------------------------------------------------------------------- the report view


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """The findings of one resource, for the per-resource details sections."""

    resource: ResourceRef
    findings: tuple[Finding, ...]
    location: SourceLocation | None

    @property
    def savings_usd(self) -> float:
        """Its savings combined as rates (never their sum, never above its spend)."""
        return combined_savings([f for f in self.findings
                                 if f.result == "fail" and f.cost_kind == "savings"])

    @property
    def unallocated_usd(self) -> float:
        return largest_per_resource(self.findings, "unallocated")

    @property
    def monthly_usd(self) -> float:
        return self.savings_usd


@dataclass(frozen=True, slots=True)
class ReportView:
    """What the human-facing reporters show, already ordered by dollar impact."""

    report: Report
    summary: Summary
    failing: tuple[Finding, ...]
    unknown: tuple[Finding, ...]
    passed: tuple[Finding, ...]
    top_fixes: tuple[Finding, ...]  # the findings of `actions`
    policies: Mapping[str, PolicyMeta]
    tool_version: str
    actions: tuple[Action, ...] = ()  # what to do first, ranked by what it saves
    unowned: tuple[Action, ...] = ()  # spend with no owner, apart from savings
    accounts: tuple[AccountRow, ...] = ()  # per account, when asked for (`ctx.by_account`)

    @property
    def money(self) -> str:
        return money_line(self.summary)

    def figure(self, finding: Finding) -> str:
        return figure(finding)

    def fix_for(self, finding: Finding) -> str:
        """Advice for the "what to do first" list; falls back to the finding's message."""
        return how_to_fix(finding, self.policies) or finding.message

    def advice(self, finding: Finding) -> str:
        return how_to_fix(finding, self.policies)

    def title_of(self, finding: Finding) -> str:
        meta = self.policies.get(finding.policy)
        return (meta.title if meta else "") or finding.title or finding.policy


def impact_order(finding: Finding) -> tuple[float, int, str, str]:
    """Sort key: most dollars first, then most severe, then by policy and resource id."""
    return (
        -finding.estimated_monthly_usd,
        -Severity(finding.severity).rank,
        finding.policy,
        finding.resource.id,
    )


def sort_by_impact(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=impact_order)


def effective_summary(report: Report) -> Summary:
    """The engine's summary; derived from the listed findings when the report carries none."""
    if report.summary.findings or report.summary.resources or not report.findings:
        return report.summary
    listed = [f for f in report.findings if f.result != "pass"]
    return Summary(
        resources=len({f.resource.id for f in report.findings}),
        findings=len(listed),
        failed=sum(1 for f in listed if f.result == "fail"),
        unknown=sum(1 for f in listed if f.result == "unknown"),
        passed=sum(1 for f in report.findings if f.result == "pass"),
        by_policy=dict(Counter(f.policy for f in listed)),
        by_severity=dict(Counter(str(f.severity) for f in listed)),
        estimated_monthly_usd=savings_total(listed),
        savings_usd=savings_total(listed),
        unallocated_usd=largest_per_resource(listed, "unallocated"),
        over_budget_usd=largest_per_resource(listed, "over_budget"),
    )


def group_by_resource(findings: Iterable[Finding]) -> list[ResourceGroup]:
    """Group findings per resource, keeping the order in which resources first appear."""
    grouped: dict[tuple[str, str], list[Finding]] = {}
    for finding in findings:
        grouped.setdefault((finding.resource.kind, finding.resource.id), []).append(finding)
    return [
        ResourceGroup(
            resource=items[0].resource,
            findings=tuple(items),
            location=next((f.location for f in items if f.location is not None), None),
        )
        for items in grouped.values()
    ]


def how_to_fix(finding: Finding, policies: Mapping[str, PolicyMeta]) -> str:
    """One line of advice: the policy's help, else the planned remediation, else ""."""
    meta = policies.get(finding.policy)
    if meta is not None and meta.help:
        return meta.help
    if finding.remediation is not None:
        detail = f": {finding.remediation.detail}" if finding.remediation.detail else ""
        return f"{finding.remediation.action}{detail}"
    return ""


def build_view(ctx: RenderContext) -> ReportView:
    ordered = sort_by_impact(ctx.report.findings)
    failing = tuple(f for f in ordered if f.result == "fail")
    titles = {policy: meta.title for policy, meta in ctx.policies.items() if meta.title}
    actions = first_actions(failing, titles, TOP_FIXES)
    return ReportView(
        report=ctx.report,
        summary=effective_summary(ctx.report),
        failing=failing,
        unknown=tuple(f for f in ordered if f.result == "unknown"),
        passed=tuple(f for f in ordered if f.result == "pass"),
        top_fixes=tuple(action.finding for action in actions),
        policies=ctx.policies,
        tool_version=ctx.tool_version,
        actions=actions,
        unowned=unowned(failing, TOP_FIXES),
        accounts=account_rows(ordered) if ctx.by_account else (),
    )


def format_usd(amount: float) -> str:
    return f"${amount:,.2f}"


def format_delta(amount: float) -> str:
    """A signed amount: `+$1,234.00`, `−$56.00`, `$0.00`."""
    if round(amount, 2) == 0:
        return format_usd(0.0)
    return ("+" if amount > 0 else "−") + format_usd(abs(amount))


def format_location(location: SourceLocation | None) -> str:
    if location is None:
        return ""
    return location.file if location.line is None else f"{location.file}:{location.line}"


# ---------------------------------------------------------------------------- jinja2 plumbing


@functools.cache
def template_environment(*, autoescape: bool) -> jinja2.Environment:
    """A jinja2 environment over engine/outputs/templates (jinja2 is imported on first use)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["usd"] = format_usd
    env.filters["delta"] = format_delta
    env.filters["where"] = format_location
    env.filters["cell"] = markdown_cell
    env.filters["md"] = markdown_text
    env.filters["code"] = markdown_code
    env.filters["cellcode"] = markdown_cell_code
    return env


# ---------------------------------------------------------------------------- Markdown escaping

_HTML_SPECIALS = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_NEWLINES = re.compile(r"\r\n|\r|\n")


def markdown_text(value: object) -> str:
    """Inline Markdown text: HTML-escaped so it can neither open tags nor close <details>, and
    newlines as <br> so it cannot end the list item or paragraph it sits in."""
    return _NEWLINES.sub("<br>", str(value).translate(_HTML_SPECIALS))


def markdown_cell(value: object) -> str:
    """Text inside a table cell: also no `|`, which would start a new column."""
    return markdown_text(value).replace("|", "\\|")


def markdown_code(value: object) -> str:
    """An inline code span that survives backticks and newlines in the value."""
    text = _NEWLINES.sub(" ", str(value))
    if "`" not in text:
        return f"`{text}`"
    return f"`` {text} ``"


def markdown_cell_code(value: object) -> str:
    """A code span inside a table cell: GFM reads `\\|` there as a literal pipe."""
    return markdown_code(value).replace("|", "\\|")


# ---------------------------------------------------------------------------- the renderer


def render(ctx: RenderContext) -> str:
    """The PR comment, with as many rows as fit in `ctx.max_chars`."""
    view = build_view(ctx)
    longest = max(len(view.failing), len(view.unknown))
    if longest <= ctx.max_chars // MIN_ROW_CHARS:
        full = _render_limited(view, limit=None)
        if len(full) <= ctx.max_chars:
            return full
    return _render_within(view, ctx.max_chars)


def _render_limited(view: ReportView, limit: int | None) -> str:
    failing = _head(view.failing, limit)
    unknown = _head(view.unknown, limit)
    template = template_environment(autoescape=False).get_template(MARKDOWN_TEMPLATE)
    return template.render(
        view=view,
        failing=failing,
        unknown=unknown,
        groups=group_by_resource(failing),
        failing_hidden=len(view.failing) - len(failing),
        unknown_hidden=len(view.unknown) - len(unknown),
        notice=TRUNCATION_NOTICE,
    )


def _head(findings: Sequence[Finding], limit: int | None) -> Sequence[Finding]:
    return findings if limit is None else findings[:limit]


def _render_within(view: ReportView, max_chars: int) -> str:
    """Binary-search the largest per-section row limit whose rendering fits the budget."""
    longest = max(len(view.failing), len(view.unknown))
    low, high = 0, min(longest - 1, max_chars // MIN_ROW_CHARS)
    best: str | None = None
    while low <= high:
        limit = (low + high) // 2
        text = _render_limited(view, limit)
        if len(text) <= max_chars:
            best, low = text, limit + 1
        else:
            high = limit - 1
    if best is not None:
        return best
    return _hard_cut(_render_limited(view, 0), max_chars, len(view.failing) + len(view.unknown))


def _hard_cut(text: str, max_chars: int, hidden: int) -> str:
    """Last resort when even the headline exceeds a (tiny) budget."""
    tail = "\n\n" + TRUNCATION_NOTICE.format(count=hidden) + "\n"
    if len(tail) >= max_chars:
        return tail.strip()[:max_chars]
    return text[: max_chars - len(tail)] + tail
