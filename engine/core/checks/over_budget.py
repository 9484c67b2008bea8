"""`over-budget`: a team group is over its monthly budget; and the `budget-overrun` estimator.

Judges the `team/<name>` groups of the `team-budget` aggregate
(`engine.core.aggregates.team_budget`) by their typed `GroupFacts`. Budgets come inline
(`budgets_param`) and from a budgets file (`file_param`): the check declares that parameter a
file, so the loading layer reads it (`engine.loading.budget_files`) and the check is compiled
with its parsed `Budgets`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.budget import Budgets, inline_budgets
from engine.core.catalog import Catalog
from engine.core.check_args import BudgetArgs
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.costs import Estimate, estimator
from engine.core.model import GroupSpend, Resource
from engine.core.tristate import Tri

BUDGETS_FILE = "budgets"  # the kind of file the loading layer reads for `file_param`
_PLAN_FACTS = ("previous_usd", "net_usd", "added_usd", "removed_usd")


def _file_budgets(value: Any) -> Budgets:
    """The budgets file's content as the loading layer parsed it (none when no file is set)."""
    if value in (None, ""):
        return Budgets()
    if isinstance(value, Budgets):
        return value
    if isinstance(value, str):
        raise ValueError(f"budgets_file {value!r} was not read: budgets files are read when "
                         "policies load from files")
    raise ValueError("budgets_file must be a path")


class OverBudget(Check):
    key = "over-budget"
    description = (
        "A team group (aggregate team-budget) is over its monthly budget: at runtime its "
        "projected run-rate exceeds it; in a plan, the change raises its planned run-rate and "
        "that exceeds it. Budgets come from the `budgets_param` mapping and the "
        "`file_param` file. Teams without a budget never fail."
    )
    Args = BudgetArgs

    @classmethod
    def file_parameters(cls, args: BudgetArgs) -> Mapping[str, str]:
        return {args.file_param: BUDGETS_FILE}

    def __init__(self, args: BudgetArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        file = _file_budgets(param_value(params, args.file_param))
        self.budgets = inline_budgets(param_value(params, args.budgets_param)).over(file)

    def budget_of(self, resource: Resource) -> float | None:
        return self.budgets.of(resource.name)

    def _over(self, resource: Resource) -> bool:
        budget = self.budget_of(resource)
        spend = _spend(resource)
        rising = not _planned(resource) or spend.net_usd > 0
        return budget is not None and spend.monthly_usd > budget and rising

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if self.budget_of(resource) is None:
            return False
        if self._over(resource):
            return True
        return None if _spend(resource).unpriced else False

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        budget = self.budget_of(resource)
        spend = _spend(resource)
        facts: dict[str, Any] = {
            "team": resource.name,
            "budget_usd": budget,
            "monthly_usd": spend.monthly_usd,
            "over_by_usd": round(max(0.0, spend.monthly_usd - budget), 2)
            if budget is not None else 0.0,
            "top_resources": [top.model_dump() for top in spend.top_resources],
        }
        if _planned(resource):
            facts.update({key: getattr(spend, key) for key in _PLAN_FACTS
                          if getattr(spend, key) is not None})
        if spend.unpriced:
            facts["unpriced"] = spend.unpriced
            if not self._over(resource):
                facts["unknown"] = ["members.hourly_usd"]
        return facts


def _spend(resource: Resource) -> GroupSpend:
    """The group's spend; nothing spent for a resource that is not a team group."""
    group = resource.group
    return group.spend if group is not None and group.spend is not None else GroupSpend()


def _planned(resource: Resource) -> bool:
    """A group of a plan's changes (judged on what the change adds)."""
    return resource.group is not None and resource.group.door == "plan"


@estimator("budget-overrun", kind="over_budget")
def budget_overrun(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    over = float(details.get("over_by_usd") or 0.0)
    monthly, budget = details.get("monthly_usd"), details.get("budget_usd")
    if budget is None:
        return Estimate(0.0, "no budget")
    return Estimate(over, f"run-rate ${float(monthly or 0):,.2f}/month − budget "
                          f"${float(budget):,.2f}/month")


register_check(OverBudget)
