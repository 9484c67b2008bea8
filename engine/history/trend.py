"""`gpuwarden history`: per run, the summary money and failing findings, and what changed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engine.history.store import Run

SUMMARY_FIELDS = ("monthly_spend_usd", "savings_usd", "unallocated_usd", "failed")
FindingKey = tuple[str, str]


def failing_keys(report: dict[str, Any]) -> set[FindingKey]:
    """Failing findings, keyed by policy + resource id."""
    keys: set[FindingKey] = set()
    for finding in report.get("findings") or []:
        if isinstance(finding, dict) and finding.get("result") == "fail":
            resource = finding.get("resource")
            ident = resource.get("id") if isinstance(resource, dict) else None
            keys.add((str(finding.get("policy")), str(ident)))
    return keys


def _by_policy(keys: set[FindingKey]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for policy, _ in sorted(keys):
        counts[policy] = counts.get(policy, 0) + 1
    return counts


def _listed(keys: set[FindingKey]) -> list[dict[str, str]]:
    return [{"policy": policy, "resource": ident} for policy, ident in sorted(keys)]


def trend(runs: Sequence[Run]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    previous: set[FindingKey] = set()
    for run in runs:
        summary = run.report.get("summary")
        summary = summary if isinstance(summary, dict) else {}
        keys = failing_keys(run.report)
        rows.append({
            "run": run.id, "at": run.at.isoformat(), "command": run.command,
            "source": run.source,
            **{name: summary.get(name) for name in SUMMARY_FIELDS},
            "by_policy": _by_policy(keys),
            "new": _listed(keys - previous), "open": _listed(keys & previous),
            "fixed": _listed(previous - keys)})
        previous = keys
    return rows


def render_trend(rows: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"runs": rows}, indent=2)
    lines = [f"{'run':>4}  {'at':<25}  {'command':<10}  {'spend $/mo':>11}  "
             f"{'savings':>10}  {'unallocated':>11}  {'failed':>6}  {'new':>4}  {'open':>4}  "
             f"{'fixed':>5}"]
    for row in rows:
        lines.append(
            f"{row['run']:>4}  {row['at']:<25}  {row['command']:<10}  "
            f"{_money(row['monthly_spend_usd']):>11}  {_money(row['savings_usd']):>10}  "
            f"{_money(row['unallocated_usd']):>11}  {row['failed'] or 0:>6}  "
            f"{len(row['new']):>4}  {len(row['open']):>4}  {len(row['fixed']):>5}")
    return "\n".join(lines)


def _money(value: object) -> str:
    return f"{value:,.2f}" if isinstance(value, int | float) else "-"


def render_grouped(rows: list[dict[str, Any]], dimension: str, fmt: str) -> str:
    """`history --group-by`: one line per run and group (table) or `{"group_by", "runs"}`."""
    if fmt == "json":
        return json.dumps({"group_by": dimension, "runs": rows}, indent=2)
    lines = [f"{'run':>4}  {'at':<25}  {dimension:<24}  {'spend $/mo':>11}  {'savings':>10}  "
             f"{'unallocated':>11}  {'failed':>6}  {'new':>4}  {'open':>4}  {'fixed':>5}"]
    for row in rows:
        for group in row["groups"]:
            lines.append(
                f"{row['run']:>4}  {row['at']:<25}  {_cut(group['group'], 24):<24}  "
                f"{_money(group['monthly_spend_usd']):>11}  {_money(group['savings_usd']):>10}  "
                f"{_money(group['unallocated_usd']):>11}  {group['failed']:>6}  "
                f"{group['new']:>4}  {group['open']:>4}  {group['fixed']:>5}")
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------------------- HTML

HISTORY_TEMPLATE = "history.html.j2"
MAX_CHART_RUNS = 200  # the latest runs
CHART_GROUPS = 8  # lines in one per-group chart: the groups with the most money and findings


def render_trend_html(rows: list[dict[str, Any]], grouped: list[dict[str, Any]],
                      dimension: str) -> str:
    """`history --format html`: the trend charts over the runs, overall and per group, and
    their tables, as one self-contained page."""
    from engine import __version__
    from engine.outputs.charts import (
        draw,
        findings_trend_chart,
        group_trend_chart,
        money_trend_chart,
    )
    from engine.outputs.html import render_page

    points = _group_points(grouped)
    charts = draw({
        "trend-money": money_trend_chart(rows), "trend-findings": findings_trend_chart(rows),
        "group-savings": group_trend_chart(points, "savings_usd", f"Savings by {dimension}",
                                           "USD per month"),
        "group-failed": group_trend_chart(points, "failed", f"Failing findings by {dimension}",
                                          "failing findings")})
    return render_page(HISTORY_TEMPLATE, trend=rows, grouped=grouped, dimension=dimension,
                       charts=charts, chart_groups=CHART_GROUPS, tool_version=__version__)


def _group_points(grouped: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart points of the CHART_GROUPS largest groups over all runs."""
    weight: dict[str, float] = {}
    for row in grouped:
        for group in row["groups"]:
            weight[group["group"]] = weight.get(group["group"], 0.0) + group["savings_usd"] \
                + group["unallocated_usd"] + group["failed"]
    top = set(sorted(weight, key=lambda name: (-weight[name], name))[:CHART_GROUPS])
    return [{"at": row["at"], **group} for row in grouped[-MAX_CHART_RUNS:]
            for group in row["groups"] if group["group"] in top]

