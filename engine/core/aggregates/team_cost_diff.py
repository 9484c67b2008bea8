"""The PR check's per-team GPU cost diff (Infracost-style), from the plan's changes.

For every change, each side (before, after) is priced by run-rate; a team's previous and planned
run-rates sum every selected resource, what the change adds and removes sums the changed ones. A
resource whose team tag changes is removed from the old team and added to the new one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.core.aggregates.registry import AggregateInputs, AggregateOutcome, PlanChange
from engine.core.aggregates.teams import TOP_RESOURCES, TeamSettings, team_resource
from engine.core.budget import Budgets, team_of
from engine.core.model import (
    ChangeAction,
    CostDiff,
    GroupSpend,
    MemberSpend,
    Resource,
    ResourceCostChange,
    TeamCostChange,
)

POLICY = "team-gpu-budget"
BASIS = ("catalog on-demand list price × count × 730 h, less the estimated spot discount on spot "
         "capacity, times the on-share of an off-hours schedule")

Priced = tuple[Resource, float | None]  # a resource and its monthly run-rate (None: no price)


@dataclass
class _TeamDiff:
    previous: float = 0.0
    planned: float = 0.0
    added: float = 0.0
    removed: float = 0.0
    unpriced: int = 0
    changed: bool = False
    resources: list[ResourceCostChange] = field(default_factory=list)


def plan_outcome(settings: TeamSettings, inputs: AggregateInputs,
                 budgets: Budgets) -> AggregateOutcome:
    """The cost diff of every team the plan changes, and a group per budgeted one."""
    teams: dict[str | None, _TeamDiff] = {}
    for change in inputs.cost_changes or ():
        _add_change(teams, change, settings, inputs)
    changed = {team: diff for team, diff in teams.items() if diff.changed}
    if not changed:
        return AggregateOutcome()
    rows = [_team_row(team, diff, budgets) for team, diff in
            sorted(changed.items(), key=lambda item: (item[0] is None, item[0] or ""))]
    cost_diff = CostDiff(
        policy=POLICY, basis=BASIS, teams=rows,
        added_monthly_usd=round(sum(r.added_monthly_usd for r in rows), 2),
        removed_monthly_usd=round(sum(r.removed_monthly_usd for r in rows), 2),
        net_monthly_usd=round(sum(r.net_monthly_usd for r in rows), 2),
    )
    groups = [team_resource(row.team, settings.team_tag, "plan", _spend(row))
              for row in rows if row.team is not None and row.budget_monthly_usd is not None]
    return AggregateOutcome(groups=groups, cost_diff=cost_diff)


def _spend(row: TeamCostChange) -> GroupSpend:
    ranked = sorted(row.resources, key=lambda c: (-(c.after_monthly_usd or 0.0), c.id))
    return GroupSpend(
        monthly_usd=row.planned_monthly_usd,
        previous_usd=row.previous_monthly_usd,
        net_usd=row.net_monthly_usd,
        added_usd=row.added_monthly_usd,
        removed_usd=row.removed_monthly_usd,
        unpriced=row.unpriced,
        top_resources=[MemberSpend(id=c.id, name=c.id, monthly_usd=c.after_monthly_usd)
                       for c in ranked if c.after_monthly_usd][:TOP_RESOURCES],
    )


def _add_change(teams: dict[str | None, _TeamDiff], change: PlanChange,
                settings: TeamSettings, inputs: AggregateInputs) -> None:
    before = _priced(change.before, settings, inputs)
    after = _priced(change.after, settings, inputs)
    ids = {r.id for r, _ in before} | {r.id for r, _ in after}
    for resource_id in sorted(ids):
        old = next(((r, usd) for r, usd in before if r.id == resource_id), None)
        new = next(((r, usd) for r, usd in after if r.id == resource_id), None)
        old_team = team_of(old[0], settings.team_tag) if old else None
        new_team = team_of(new[0], settings.team_tag) if new else None
        if old is not None:
            teams.setdefault(old_team, _TeamDiff()).previous += old[1] or 0.0
        if new is not None:
            teams.setdefault(new_team, _TeamDiff()).planned += new[1] or 0.0
        if change.action != "no-op":
            _record(teams, change.action, resource_id, old, new, old_team, new_team)


def _record(teams: dict[str | None, _TeamDiff], action: ChangeAction, resource_id: str,
            old: Priced | None, new: Priced | None,
            old_team: str | None, new_team: str | None) -> None:
    """What one changed resource adds to and removes from its team; a resource whose team tag
    changes is removed from the old team and added to the new one."""
    if old is not None and new is not None and old_team != new_team:
        sides = [(old_team, old, None), (new_team, None, new)]
    else:
        sides = [(new_team if new is not None else old_team, old, new)]
    for team, before, after in sides:
        diff = teams.setdefault(team, _TeamDiff())
        diff.changed = True
        before_usd = before[1] if before else None
        after_usd = after[1] if after else None
        if (before is not None and before_usd is None) or (after is not None and after_usd is None):
            diff.unpriced += 1
        delta = (after_usd or 0.0) - (before_usd or 0.0)
        diff.added += max(delta, 0.0)
        diff.removed += max(-delta, 0.0)
        diff.resources.append(ResourceCostChange(
            id=resource_id, action=action,
            before_monthly_usd=before_usd, after_monthly_usd=after_usd))


def _priced(resources: Iterable[Resource], settings: TeamSettings,
            inputs: AggregateInputs) -> list[Priced]:
    return [(r, settings.rate(r)) for r in resources if inputs.selects(r)]


def _team_row(team: str | None, diff: _TeamDiff, budgets: Budgets) -> TeamCostChange:
    return TeamCostChange(
        team=team,
        previous_monthly_usd=round(diff.previous, 2),
        planned_monthly_usd=round(diff.planned, 2),
        added_monthly_usd=round(diff.added, 2),
        removed_monthly_usd=round(diff.removed, 2),
        net_monthly_usd=round(diff.added - diff.removed, 2),
        budget_monthly_usd=budgets.of(team),
        unpriced=diff.unpriced,
        resources=diff.resources,
    )
