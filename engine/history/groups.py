"""`gpuwarden history --group-by team|account|policy`: the trend per group. By policy from the
recorded reports alone; by team or account also from the recorded snapshots, read back as a
replay does (`snapshot_resources`), for each resource's tags, account and spend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from engine.core.errors import InputError
from engine.core.model import Finding, Report
from engine.history.store import Run
from engine.history.trend import FindingKey
from engine.outputs import ResourceFacts
from engine.outputs.breakdown import Dimension, GroupMoney, facts_of, group_of, money_by

if TYPE_CHECKING:
    from engine.core.evaluate import Engine

GROUP_DIMENSIONS: tuple[Dimension, ...] = ("team", "account", "policy")


def recorded_findings(run: Run) -> list[Finding]:
    """The run's findings, as its stored JSON report lists them."""
    try:
        return Report.model_validate(run.report).findings
    except ValidationError:
        raise InputError(f"history: run {run.id}: damaged report") from None


def run_facts(run: Run, dimension: Dimension, engine: Engine | None) -> tuple[ResourceFacts, ...]:
    if dimension == "policy" or engine is None:
        return ()
    from engine.history.whatif import snapshot_resources

    return facts_of(snapshot_resources(run, engine), engine.catalog)


def _keys_by_group(dimension: Dimension, findings: Sequence[Finding],
                   facts: Sequence[ResourceFacts]) -> dict[str, set[FindingKey]]:
    by_key = {(fact.provider, fact.id): fact for fact in facts}
    keys: dict[str, set[FindingKey]] = {}
    for finding in findings:
        if finding.result == "fail":
            group = group_of(dimension, finding, by_key)
            keys.setdefault(group, set()).add((finding.policy, finding.resource.id))
    return keys


def _group_row(money: GroupMoney | None, group: str, dimension: Dimension,
               now: set[FindingKey], before: set[FindingKey]) -> dict[str, Any]:
    money = money or GroupMoney(group=group)
    return {"group": group,
            "monthly_spend_usd": None if dimension == "policy" else money.spend_usd,
            "savings_usd": money.savings_usd, "unallocated_usd": money.unallocated_usd,
            "over_budget_usd": money.over_budget_usd, "failed": len(now),
            "new": len(now - before), "open": len(now & before), "fixed": len(before - now)}


def grouped_trend(runs: Sequence[Run], dimension: Dimension,
                  engine: Engine | None = None) -> list[dict[str, Any]]:
    """Per run, per group: the money, failing findings, and how many are new, still open and
    fixed since the run before (a group with no failing finding left shows its fixed ones)."""
    rows: list[dict[str, Any]] = []
    previous: dict[str, set[FindingKey]] = {}
    for run in runs:
        findings = recorded_findings(run)
        facts = run_facts(run, dimension, engine)
        money = {row.group: row for row in money_by(dimension, findings, facts, keep=None)}
        keys = _keys_by_group(dimension, findings, facts)
        names = sorted(set(money) | set(keys) | set(previous))
        groups = [_group_row(money.get(name), name, dimension, keys.get(name, set()),
                             previous.get(name, set())) for name in names]
        rows.append({"run": run.id, "at": run.at.isoformat(), "command": run.command,
                     "groups": [g for g in groups if any(
                         g[k] for k in ("monthly_spend_usd", "savings_usd", "unallocated_usd",
                                        "over_budget_usd", "failed", "fixed"))]})
        previous = keys
    return rows
