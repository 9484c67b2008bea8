"""A group priced at its minimum says so: an autoscaling group with no desired capacity starts
at its min size (as AWS does), and its cost basis names that instead of passing a guess for the
configured size."""

from __future__ import annotations

from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.costs import resource_spend
from tests.test_terraform_adapter import change, mixed_policy, only


@pytest.mark.parametrize(("attrs", "unknown", "count", "note"), [
    ({"min_size": 2, "max_size": 6}, None, 2, True),
    ({"min_size": 2, "max_size": 6, "desired_capacity": 3}, None, 3, False),
    ({"min_size": 2, "max_size": 6, "desired_capacity": None}, {"desired_capacity": True}, 2,
     False),  # known at apply: the count is unknown, not the minimum
])
def test_a_group_without_desired_capacity_is_priced_at_min_size_and_says_so(
        attrs: dict[str, Any], unknown: dict[str, Any] | None, count: int, note: bool) -> None:
    group = only(change("aws_autoscaling_group.g",
                        {**attrs, "mixed_instances_policy": mixed_policy(None, 100)},
                        unknown=unknown))
    assert group.count == count
    assert (group.count_basis is not None) == note
    spend = resource_spend(group, builtin_catalog())
    assert spend.monthly_usd is not None
    assert ("(min size: no desired size is set)" in spend.basis) == note, spend.basis
    assert f"× {count}" in spend.basis
