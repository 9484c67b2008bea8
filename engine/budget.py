"""Team GPU budgets: budgets per team, projected run-rates, and the plan's per-team cost diff.

- **Budgets** are `team: monthly USD`, inline (`budgets` parameter) or in a YAML/JSON file
  (`budgets_file`); inline entries win. Team names match case-insensitively.
- **A resource's team** is its tag/label `team` (the `team_tag` parameter; key case-insensitive,
  `-`/`_` equal), else, for Kubernetes, its namespace's label.
- **Run-rate**: the catalog's on-demand price × count × 730 h, less the cloud's estimated spot
  discount on spot capacity, times the share of the week the resource is on under its off-hours
  schedule (its `gpuwarden-offhours` tag, else the policy's `default_schedule` if one is set).
- **Runtime**: one `team/<name>` group per team with running GPU resources; the policy fails
  when the projected run-rate exceeds the budget.
- **PR check**: from the plan's changes before and after (`plan_cost_changes`), each team's
  previous and planned run-rate, what the change adds and removes; the report's `cost_diff`
  lists them, and the policy fails when the change raises a team's planned run-rate above its
  budget. The plan only shows the spend its configuration manages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import offhours
from engine.aggregates import AggregateInputs, AggregateOutcome, Member, aggregator
from engine.catalog import HOURS_PER_MONTH, Catalog
from engine.conditions import walk
from engine.costs import hourly_price
from engine.errors import InputError
from engine.labels import normalize_key
from engine.model import (
    Capacity,
    Category,
    CostDiff,
    Resource,
    ResourceCostChange,
    State,
    TeamCostChange,
)
from engine.yamlsource import line_of, load_yaml_documents

if TYPE_CHECKING:
    from engine.policy import CompiledPolicy
    from engine.sources.terraform import PlanCostChange

PROVIDER = "gpuwarden"
KIND = "Team"
TOP_RESOURCES = 5
BASIS = ("catalog on-demand list price × count × 730 h, less the estimated spot discount on spot "
         "capacity, times the on-share of an off-hours schedule")


# ---------------------------------------------------------------------------- budgets


def load_budgets(inline: Any, file: Any) -> dict[str, float]:
    """Budgets by lower-cased team name: the file's, then the inline mapping's on top.

    A bad inline value raises ValueError (the policy loader reports it at the policy); a bad
    file raises InputError naming the file and line.
    """
    budgets: dict[str, float] = {}
    if file not in (None, ""):
        if not isinstance(file, str):
            raise ValueError("budgets_file must be a path")
        budgets.update(_budget_file(Path(file)))
    if inline is not None:
        if not isinstance(inline, Mapping):
            raise ValueError("budgets must be a mapping of team: monthly USD")
        for team, amount in inline.items():
            budgets[str(team).strip().lower()] = _amount(team, amount)
    return budgets


def _budget_file(path: Path) -> dict[str, float]:
    try:
        text = path.read_text("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read budgets file: {getattr(exc, 'strerror', None) or exc}",
                         file=str(path)) from None
    documents = load_yaml_documents(text, str(path))
    document = documents[0] if len(documents) == 1 else None
    if not isinstance(document, Mapping):
        raise InputError("a budgets file is one mapping of team: monthly USD", file=str(path))
    budgets: dict[str, float] = {}
    for team, amount in document.items():
        try:
            budgets[str(team).strip().lower()] = _amount(team, amount)
        except ValueError as exc:
            raise InputError(str(exc), file=str(path), line=line_of(document, team)) from None
    return budgets


def _amount(team: Any, amount: Any) -> float:
    if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
        raise ValueError(f"budget of team {team!r} must be a non-negative number of USD a month, "
                         f"not {amount!r}")
    return float(amount)


def policy_budgets(policy: CompiledPolicy) -> dict[str, float]:
    """The budgets the policy's violation compiled (a check with a `budgets` mapping)."""
    for node in walk(policy.violation):
        budgets = getattr(node, "budgets", None)
        if isinstance(budgets, dict):
            return budgets
    return {}


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
    hourly, source = hourly_price(resource, catalog)
    if hourly is None:
        return RunRate(None, source)
    monthly = hourly * resource.count * HOURS_PER_MONTH
    parts = [f"{source} × {resource.count} × 730 h"]
    if resource.capacity is Capacity.SPOT:
        discount = catalog.spot_discount(resource.provider)
        monthly *= 1.0 - discount
        parts.append(f"spot −{discount:.0%} (estimate)")
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


@dataclass
class _Settings:
    team_tag: str
    schedule_tag: str
    default_schedule: str | None
    catalog: Catalog

    @classmethod
    def of(cls, policy: CompiledPolicy, catalog: Catalog) -> _Settings:
        params = policy.spec.parameters
        default = params.get("default_schedule")
        return cls(str(params.get("team_tag") or "team"),
                   str(params.get("schedule_tag") or "gpuwarden-offhours"),
                   str(default) if default else None, catalog)

    def rate(self, resource: Resource) -> float | None:
        return run_rate(resource, self.catalog, schedule_tag=self.schedule_tag,
                        default_schedule=self.default_schedule).monthly_usd


# ---------------------------------------------------------------------------- runtime


@dataclass
class _TeamSpend:
    monthly: float = 0.0
    unpriced: int = 0
    resources: list[tuple[float, Resource]] = field(default_factory=list)

    def add(self, resource: Resource, monthly: float | None) -> None:
        if monthly is None:
            self.unpriced += 1
        else:
            self.monthly += monthly
            self.resources.append((monthly, resource))

    def top(self) -> list[dict[str, Any]]:
        ranked = sorted(self.resources, key=lambda item: (-item[0], item[1].id))
        return [{"id": r.id, "name": r.name, "monthly_usd": round(usd, 2)}
                for usd, r in ranked[:TOP_RESOURCES]]


@aggregator("team-budget")
def by_team(policy: CompiledPolicy, members: Sequence[Member],
            inputs: AggregateInputs) -> AggregateOutcome:
    """Runtime: one group per team that has a budget. PR check: the cost diff of every team,
    and a group per budgeted team the plan changes. Planned resources without their plan's
    changes (a Terraform plan inside a snapshot) are not judged: what a change adds and removes
    needs both sides of it, which `check-plan` reads."""
    settings = _Settings.of(policy, inputs.ctx.catalog)
    budgets = policy_budgets(policy)
    if inputs.door == "plan":
        if inputs.cost_changes is None:
            return AggregateOutcome()
        return _plan_outcome(settings, inputs, budgets)
    spend: dict[str, _TeamSpend] = {}
    for member in members:
        team = team_of(member.resource, settings.team_tag)
        if team is None or team.lower() not in budgets:
            continue
        monthly = settings.rate(member.resource) if member.certain else None
        spend.setdefault(team, _TeamSpend()).add(member.resource, monthly)
    groups = [
        team_resource(team, settings.team_tag, inputs.door, {
            "monthly_usd": round(found.monthly, 2),
            "net_usd": round(found.monthly, 2),
            "unpriced": found.unpriced,
            "top_resources": found.top(),
        })
        for team, found in sorted(spend.items())
    ]
    return AggregateOutcome(groups=groups)


def team_resource(team: str, team_tag: str, door: str, facts: dict[str, Any]) -> Resource:
    """The synthetic `team/<name>` resource a team budget finding is about."""
    return Resource(
        provider=PROVIDER,
        kind=KIND,
        category=Category.OTHER,
        id=f"team/{team}",
        name=team,
        tags={team_tag: team},
        state=State.PLANNED if door == "plan" else State.RUNNING,
        raw={"door": door, **facts},
    )


# ---------------------------------------------------------------------------- PR check


@dataclass
class _TeamDiff:
    previous: float = 0.0
    planned: float = 0.0
    added: float = 0.0
    removed: float = 0.0
    unpriced: int = 0
    changed: bool = False
    resources: list[ResourceCostChange] = field(default_factory=list)


def _plan_outcome(settings: _Settings, inputs: AggregateInputs,
                  budgets: Mapping[str, float]) -> AggregateOutcome:
    teams: dict[str | None, _TeamDiff] = {}
    for change in inputs.cost_changes or ():
        _add_change(teams, change, settings, inputs)
    changed = {team: diff for team, diff in teams.items() if diff.changed}
    if not changed:
        return AggregateOutcome()
    rows = [_team_row(team, diff, budgets) for team, diff in
            sorted(changed.items(), key=lambda item: (item[0] is None, item[0] or ""))]
    cost_diff = CostDiff(
        policy="team-gpu-budget", basis=BASIS, teams=rows,
        added_monthly_usd=round(sum(r.added_monthly_usd for r in rows), 2),
        removed_monthly_usd=round(sum(r.removed_monthly_usd for r in rows), 2),
        net_monthly_usd=round(sum(r.net_monthly_usd for r in rows), 2),
    )
    groups = [
        team_resource(row.team, settings.team_tag, "plan", {
            "monthly_usd": row.planned_monthly_usd,
            "previous_usd": row.previous_monthly_usd,
            "net_usd": row.net_monthly_usd,
            "added_usd": row.added_monthly_usd,
            "removed_usd": row.removed_monthly_usd,
            "unpriced": row.unpriced,
            "top_resources": [{"id": c.id, "name": c.id, "monthly_usd": c.after_monthly_usd}
                              for c in sorted(row.resources, key=lambda c: (
                                  -(c.after_monthly_usd or 0.0), c.id))
                              if c.after_monthly_usd][:TOP_RESOURCES],
        })
        for row in rows if row.team is not None and row.budget_monthly_usd is not None
    ]
    return AggregateOutcome(groups=groups, cost_diff=cost_diff)


def _add_change(teams: dict[str | None, _TeamDiff], change: PlanCostChange,
                settings: _Settings, inputs: AggregateInputs) -> None:
    before = _priced(change.before, settings, inputs)
    after = _priced(change.after, settings, inputs)
    ids = {r.id for r, _ in before} | {r.id for r, _ in after}
    for resource_id in sorted(ids):
        old = next(((r, usd) for r, usd in before if r.id == resource_id), None)
        new = next(((r, usd) for r, usd in after if r.id == resource_id), None)
        old_team = team_of(old[0], settings.team_tag) if old else None
        new_team = team_of(new[0], settings.team_tag) if new else None
        if old is not None:
            diff = teams.setdefault(old_team, _TeamDiff())
            diff.previous += old[1] or 0.0
        if new is not None:
            diff = teams.setdefault(new_team, _TeamDiff())
            diff.planned += new[1] or 0.0
        if change.action == "no-op":
            continue
        _record(teams, change.action, resource_id, old, new, old_team, new_team)


def _record(teams: dict[str | None, _TeamDiff], action: str, resource_id: str,
            old: tuple[Resource, float | None] | None, new: tuple[Resource, float | None] | None,
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


def _priced(resources: Iterable[Resource], settings: _Settings,
            inputs: AggregateInputs) -> list[tuple[Resource, float | None]]:
    return [(r, settings.rate(r)) for r in resources if inputs.selects(r)]


def _team_row(team: str | None, diff: _TeamDiff, budgets: Mapping[str, float]) -> TeamCostChange:
    return TeamCostChange(
        team=team,
        previous_monthly_usd=round(diff.previous, 2),
        planned_monthly_usd=round(diff.planned, 2),
        added_monthly_usd=round(diff.added, 2),
        removed_monthly_usd=round(diff.removed, 2),
        net_monthly_usd=round(diff.added - diff.removed, 2),
        budget_monthly_usd=budgets.get(team.lower()) if team is not None else None,
        unpriced=diff.unpriced,
        resources=diff.resources,
    )
