"""The aggregator registry and what an aggregator reads and returns.

An aggregator (`@aggregator("team-budget")`) turns the members an aggregate policy's scope
selected at one door into **group resources**: synthetic `Resource`s such as `team/research` or
`Namespace/ml`, whose typed `GroupFacts` sum up their members. It sees the policy through
`GroupPolicy`, the few attributes it needs, so this module depends on no policy module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from engine.core.conditions import Condition, EvalContext
from engine.core.model import Category, CostDiff, Door, Enforcement, PlanAction, Resource


class PolicySettings(Protocol):
    """What an aggregator reads of a policy's spec."""

    @property
    def aggregate(self) -> str | None: ...

    @property
    def parameters(self) -> dict[str, Any]: ...


class GroupPolicy(Protocol):
    """An aggregate policy as aggregation sees it (a compiled policy fits)."""

    @property
    def id(self) -> str: ...

    @property
    def spec(self) -> PolicySettings: ...

    @property
    def categories(self) -> frozenset[Category]: ...

    @property
    def doors(self) -> Mapping[Door, Enforcement]: ...

    @property
    def scope(self) -> Condition | None: ...

    @property
    def violation(self) -> Condition: ...

    @property
    def exempt(self) -> Sequence[re.Pattern[str]]: ...


class PlanChange(Protocol):
    """One change of a plan with its normalized resources before and after it (the cost diff's
    input; Terraform plans give them)."""

    @property
    def action(self) -> PlanAction: ...

    @property
    def before(self) -> Sequence[Resource]: ...

    @property
    def after(self) -> Sequence[Resource]: ...


class Member(NamedTuple):  # one per resource and aggregate policy: a tuple is cheapest
    """A resource an aggregate policy's scope selected; `certain` is False when the scope's
    verdict was unknown (a planned instance whose type, hence GPUs, is not known yet)."""

    resource: Resource
    certain: bool = True


@dataclass(frozen=True, slots=True)
class AggregateInputs:
    """What an aggregator may read besides its members."""

    ctx: EvalContext
    door: Door
    selects: Callable[[Resource], bool]  # the policy's scope and exemptions, for other resources
    cost_changes: Sequence[PlanChange] | None = None  # the plan's changes (check-plan only)


@dataclass
class AggregateOutcome:
    groups: list[Resource] = field(default_factory=list)
    cost_diff: CostDiff | None = None


Aggregator = Callable[[GroupPolicy, Sequence[Member], AggregateInputs], AggregateOutcome]
AGGREGATORS: dict[str, Aggregator] = {}


def aggregator(name: str) -> Callable[[Aggregator], Aggregator]:
    def register(function: Aggregator) -> Aggregator:
        AGGREGATORS[name] = function
        return function

    return register
