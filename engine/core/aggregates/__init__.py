"""Aggregate policies: judged per group of resources (a team, a namespace), not per resource.

A policy with `aggregate: NAME` is evaluated in two steps. During the engine's per-resource pass
its `scope` picks the **members** (resources of its categories, at a door where it is not `off`,
not exempt): `Aggregation` (`collect`) gathers them. Afterwards the registered aggregator
(`registry`) turns each door's members into **group resources**, synthetic `Resource`s such as
`team/research` or `Namespace/ml` whose typed `GroupFacts` sum up their members, and the
policy's `violation` is tested on each group. A group is exempt by the policy's `exempt:` globs
on its id, or by an exemption tag/label it carries (a namespace's labels).

One module per aggregator, registered by `@aggregator(name)`; importing this package registers
every built-in one (`namespace`, `team-budget`).
"""

from __future__ import annotations

from engine.core.aggregates import namespace, team_budget
from engine.core.aggregates.collect import Aggregation
from engine.core.aggregates.registry import (
    AGGREGATORS,
    AggregateInputs,
    AggregateOutcome,
    GroupPolicy,
    Member,
    PlanChange,
    aggregator,
)

__all__ = [
    "AGGREGATORS",
    "AggregateInputs",
    "AggregateOutcome",
    "Aggregation",
    "GroupPolicy",
    "Member",
    "PlanChange",
    "aggregator",
    "namespace",
    "team_budget",
]
