"""Where the money is: a report's spend, savings, spend with no owner and over-budget figures
grouped by team, account, provider or policy, for the HTML report's charts and tables.

Each kind stays apart, as in the summary: a resource's savings combine as rates
(`combined_savings`), its spend with no owner is counted once, and nothing is added to spend.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from engine.core.evaluate import combined_savings
from engine.core.model import Finding
from engine.outputs import ResourceFacts

if TYPE_CHECKING:
    from engine.core.catalog import Catalog
    from engine.core.model import Resource

Dimension = Literal["team", "account", "provider", "policy"]
DIMENSIONS: tuple[Dimension, ...] = ("team", "account", "provider", "policy")
NO_GROUP = {"team": "(no team)", "account": "(no account)", "provider": "(no provider)",
            "policy": "(no policy)"}
MAX_GROUPS = 12  # the largest groups by name; the rest are folded into one "other" row
MAX_LABEL_CHARS = 60
ResourceKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class GroupMoney:
    group: str
    spend_usd: float = 0.0
    savings_usd: float = 0.0
    unallocated_usd: float = 0.0
    over_budget_usd: float = 0.0
    failed: int = 0

    @property
    def largest(self) -> float:
        return max(self.spend_usd, self.savings_usd, self.unallocated_usd, self.over_budget_usd)


def facts_of(resources: Iterable[Resource], catalog: Catalog) -> tuple[ResourceFacts, ...]:
    """The scanned GPU resources, each once, with the spend the summary counts for it."""
    from engine.core.budget import team_of
    from engine.core.costs import resource_spend

    facts: dict[ResourceKey, ResourceFacts] = {}
    for resource in resources:
        key = (resource.provider, resource.id)
        if resource.has_gpu and key not in facts:
            spend = resource_spend(resource, catalog).monthly_usd or 0.0
            facts[key] = ResourceFacts(provider=resource.provider, id=resource.id,
                                       team=team_of(resource), account=resource.account,
                                       monthly_spend_usd=spend)
    return tuple(facts.values())


def label(text: object) -> str:
    """A group name as charts show it: printable, one line, bounded."""
    value = "".join(c if c.isprintable() else " " for c in str(text)).strip()
    return value if len(value) <= MAX_LABEL_CHARS else value[: MAX_LABEL_CHARS - 1] + "…"


class _Sums:
    def __init__(self) -> None:
        self.by_group: dict[str, dict[str, float]] = {}

    def add(self, group: str, field: str, amount: float) -> None:
        sums = self.by_group.setdefault(group, {})
        sums[field] = sums.get(field, 0.0) + amount

    def rows(self) -> list[GroupMoney]:
        rows = [GroupMoney(group=group, spend_usd=round(sums.get("spend_usd", 0.0), 2),
                           savings_usd=round(sums.get("savings_usd", 0.0), 2),
                           unallocated_usd=round(sums.get("unallocated_usd", 0.0), 2),
                           over_budget_usd=round(sums.get("over_budget_usd", 0.0), 2),
                           failed=int(sums.get("failed", 0)))
                for group, sums in self.by_group.items()]
        return sorted(rows, key=lambda row: (-row.largest, -row.failed, row.group))


def _failing(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.result == "fail"]


def _per_resource(findings: Iterable[Finding], kind: str) -> dict[ResourceKey, list[Finding]]:
    grouped: dict[ResourceKey, list[Finding]] = {}
    for finding in findings:
        if finding.cost_kind == kind:
            grouped.setdefault((finding.resource.provider, finding.resource.id), []).append(finding)
    return grouped


def group_of(dimension: Dimension, finding: Finding,
              facts: dict[ResourceKey, ResourceFacts]) -> str:
    """Which group a finding's figure belongs to; a team budget's figure to its team."""
    if dimension == "policy":
        return finding.policy
    if dimension == "provider":
        return finding.resource.provider
    fact = facts.get((finding.resource.provider, finding.resource.id))
    value = getattr(fact, dimension) if fact is not None else None
    if value is None and dimension == "team" and finding.cost_kind == "over_budget":
        value = finding.details.get("team") or finding.resource.name
    return label(value) if value else NO_GROUP[dimension]


def money_by(dimension: Dimension, findings: Sequence[Finding],
             facts: Sequence[ResourceFacts] = (), keep: int | None = MAX_GROUPS
             ) -> list[GroupMoney]:
    """The failing findings' figures (and, but for policies, the spend) per group, largest
    first. By policy, each policy's own savings: several on one resource combine to less."""
    by_key = {(f.provider, f.id): f for f in facts}
    sums = _Sums()
    if dimension != "policy":
        for fact in facts:
            group = getattr(fact, dimension)
            sums.add(label(group) if group else NO_GROUP[dimension], "spend_usd",
                     fact.monthly_spend_usd)
    failing = _failing(findings)
    for finding in failing:
        sums.add(group_of(dimension, finding, by_key), "failed", 1)
    _add_savings(sums, dimension, failing, by_key)
    for kind, field in (("unallocated", "unallocated_usd"), ("over_budget", "over_budget_usd")):
        for group_findings in _per_resource(failing, kind).values():
            largest = max(group_findings, key=lambda f: f.estimated_monthly_usd)
            if dimension == "policy":
                for finding in group_findings:
                    sums.add(finding.policy, field, finding.estimated_monthly_usd)
            else:
                sums.add(group_of(dimension, largest, by_key), field,
                         largest.estimated_monthly_usd)
    rows = sums.rows()
    return rows if keep is None else fold(rows, keep)


def _add_savings(sums: _Sums, dimension: Dimension, failing: list[Finding],
                 by_key: dict[ResourceKey, ResourceFacts]) -> None:
    for group_findings in _per_resource(failing, "savings").values():
        if dimension == "policy":
            for finding in group_findings:
                sums.add(finding.policy, "savings_usd", finding.estimated_monthly_usd)
        else:
            sums.add(group_of(dimension, group_findings[0], by_key), "savings_usd",
                     combined_savings(group_findings))


def fold(rows: list[GroupMoney], keep: int = MAX_GROUPS) -> list[GroupMoney]:
    """The first `keep` rows, and the rest added into one "other" row."""
    if len(rows) <= keep:
        return rows
    rest = rows[keep - 1:]
    other = GroupMoney(
        group=f"other ({len(rest)} groups)",
        spend_usd=round(sum(r.spend_usd for r in rest), 2),
        savings_usd=round(sum(r.savings_usd for r in rest), 2),
        unallocated_usd=round(sum(r.unallocated_usd for r in rest), 2),
        over_budget_usd=round(sum(r.over_budget_usd for r in rest), 2),
        failed=sum(r.failed for r in rest))
    return [*rows[: keep - 1], other]
