"""Team GPU budgets and run-rates (core: no I/O).

- **Budgets** are `team: monthly USD`, inline (`budgets` parameter) or in a YAML/JSON file
  (`budgets_file`, read by the loading layer: `engine.loading.budget_files`); inline entries win.
  Team names match case-insensitively.
- **A resource's team** is its tag/label `team` (the `team_tag` parameter; key case-insensitive,
  `-`/`_` equal), else, for Kubernetes, its namespace's label.
- **Run-rate**: the catalog's on-demand price × count × 730 h, less the cloud's estimated spot
  discount on spot capacity, times the share of the week the resource is on under its off-hours
  schedule (its `gpuwarden-offhours` tag, else the policy's `default_schedule` if one is set).

The `team-budget` aggregate (`engine.core.aggregates.team_budget`) and the `over-budget` check
(`engine.core.checks.over_budget`) use these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.core import offhours
from engine.core.catalog import Catalog
from engine.core.costs import resource_spend
from engine.core.labels import normalize_key
from engine.core.model import Resource

# ---------------------------------------------------------------------------- budgets


@dataclass(frozen=True, slots=True)
class Budgets:
    """Monthly USD budgets by lower-cased team name."""

    by_team: Mapping[str, float] = field(default_factory=dict)

    def of(self, team: str | None) -> float | None:
        return None if team is None else self.by_team.get(team.strip().lower())

    def over(self, base: Budgets) -> Budgets:
        """These budgets on top of `base` (an entry here wins)."""
        return Budgets({**base.by_team, **self.by_team})


def budget_amount(team: Any, amount: Any) -> float:
    """A budget's monthly USD; ValueError naming the team when it is not a number ≥ 0."""
    if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
        raise ValueError(f"budget of team {team!r} must be a non-negative number of USD a month, "
                         f"not {amount!r}")
    return float(amount)


def inline_budgets(value: Any) -> Budgets:
    """The `budgets` parameter's mapping; ValueError when it is not one of team: monthly USD."""
    if value is None:
        return Budgets()
    if not isinstance(value, Mapping):
        raise ValueError("budgets must be a mapping of team: monthly USD")
    return Budgets({str(team).strip().lower(): budget_amount(team, amount)
                    for team, amount in value.items()})


# ---------------------------------------------------------------------------- run-rates


def team_of(resource: Resource, key: str = "team") -> str | None:
    """The resource's team tag/label (key case-insensitive), else its namespace's label."""
    wanted = normalize_key(key)
    for labels in (resource.tags, resource.namespace_labels):
        for name, value in labels.items():
            if normalize_key(name) == wanted and str(value).strip():
                return str(value).strip()
    return None


@dataclass(frozen=True, slots=True)
class RunRate:
    monthly_usd: float | None  # None: no price known
    basis: str


def run_rate(resource: Resource, catalog: Catalog, *, schedule_tag: str = "gpuwarden-offhours",
             default_schedule: str | None = None) -> RunRate:
    """Projected monthly cost of a GPU resource as it is configured to run."""
    spend = resource_spend(resource, catalog)  # the one price every figure of it uses
    if spend.monthly_usd is None:
        return RunRate(None, spend.basis)
    monthly = spend.monthly_usd
    parts = [spend.basis]
    schedule = _schedule(resource, schedule_tag, default_schedule)
    if schedule is not None and schedule.off_fraction() > 0:
        on = 1.0 - schedule.off_fraction()
        monthly *= on
        parts.append(f"on {on:.0%} of the week ({schedule.text})")
    return RunRate(round(monthly, 2), "; ".join(parts))


def _schedule(resource: Resource, tag: str, default: str | None) -> offhours.Schedule | None:
    text = resource.tags.get(tag) or resource.annotations.get(tag) or default
    if not text:
        return None
    try:
        return offhours.parse_schedule(text)
    except offhours.OffhoursError:
        return None  # an unreadable schedule is not applied (gpu-off-hours-shutdown reports it)
