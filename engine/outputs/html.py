"""Self-contained single-page HTML report: inline CSS, charts drawn as static SVG at render
time, one small inline script (sorting and filtering; the page reads the same without it),
jinja2 with autoescaping on. A Content-Security-Policy lets no other script run."""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.core.model import Severity
from engine.outputs import RenderContext, ResourceFacts
from engine.outputs.breakdown import Dimension, GroupMoney, facts_of, money_by
from engine.outputs.charts import (
    KIND_LABELS,
    Charts,
    draw,
    findings_trend_chart,
    money_chart,
    money_trend_chart,
)
from engine.outputs.markdown import (
    TEMPLATES_DIR,
    build_view,
    group_by_resource,
    template_environment,
)

if TYPE_CHECKING:
    from engine.core.catalog import Catalog
    from engine.core.model import Resource

HTML_TEMPLATE = "report.html.j2"
SCRIPT_FILE = "report.js"
MONEY_KINDS: dict[Dimension, tuple[str, ...]] = {
    "team": ("spend_usd", "savings_usd", "unallocated_usd", "over_budget_usd"),
    "account": ("spend_usd", "savings_usd", "unallocated_usd"),
    "provider": ("spend_usd", "savings_usd", "unallocated_usd"),
    "policy": ("savings_usd", "unallocated_usd", "over_budget_usd"),
}


@functools.cache
def page_script() -> tuple[str, str]:
    """The inline script and the CSP source that allows exactly it."""
    text = (TEMPLATES_DIR / SCRIPT_FILE).read_text("utf-8")
    digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    return text, f"'sha256-{digest}'"


def content_security_policy() -> str:
    """Nothing loads from anywhere; inline styles and the one known script only."""
    return (f"default-src 'none'; style-src 'unsafe-inline'; script-src {page_script()[1]}; "
            "img-src data:; base-uri 'none'; form-action 'none'")


def render_page(template_name: str, **values: Any) -> str:
    """An HTML page from `template_name`, with the shared script and CSP."""
    from markupsafe import Markup

    template = template_environment(autoescape=True).get_template(template_name)
    return template.render(script=Markup(page_script()[0]), csp=content_security_policy(),
                           severity_rank=_severity_rank, kind_labels=KIND_LABELS,
                           money_kinds=MONEY_KINDS, **values)


def breakdowns(ctx: RenderContext) -> dict[Dimension, list[GroupMoney]]:
    """The money by team (when the scan's resources are known), account (when they are in
    more than one), provider and policy."""
    dimensions: list[Dimension] = ["provider", "policy"]
    if len({fact.account for fact in ctx.resources}) > 1:
        dimensions.insert(0, "account")
    if ctx.resources:
        dimensions.insert(0, "team")
    return {dimension: money_by(dimension, ctx.report.findings, ctx.resources)
            for dimension in dimensions}


def report_charts(groups: Mapping[Dimension, Sequence[GroupMoney]],
                  trend: Sequence[Mapping[str, Any]]) -> Charts:
    specs: dict[str, Any] = {
        f"by-{dimension}": money_chart(rows, dimension, MONEY_KINDS[dimension])
        for dimension, rows in groups.items()}
    if trend:
        specs["trend-money"] = money_trend_chart(trend)
        specs["trend-findings"] = findings_trend_chart(trend)
    return draw(specs)


def render(ctx: RenderContext) -> str:
    """The full report as one HTML page; unlike the PR comment it is never truncated."""
    view = build_view(ctx)
    groups = breakdowns(ctx)
    return render_page(HTML_TEMPLATE, view=view, groups=group_by_resource(view.failing),
                       breakdowns=groups, trend=list(ctx.trend),
                       charts=report_charts(groups, ctx.trend))


def report_extras(resources: Iterable[Resource], catalog: Catalog,
                  trend: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """What a scan adds to its RenderContext for the HTML report: the resources' teams and
    spend, and the history's trend when it records one."""
    facts: tuple[ResourceFacts, ...] = facts_of(resources, catalog)
    return {"resources": facts, "trend": tuple(trend)}


def _severity_rank(severity: str) -> int:
    try:
        return Severity(severity).rank
    except ValueError:
        return 0
