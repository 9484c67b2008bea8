"""The `namespace` aggregate: one `Namespace/<name>` group per namespace with members."""

from __future__ import annotations

from collections.abc import Sequence

from engine.core.aggregates.registry import (
    AggregateInputs,
    AggregateOutcome,
    GroupPolicy,
    Member,
    aggregator,
)
from engine.core.model import Category, Door, GroupFacts, Resource, State, WorkloadSpec


@aggregator("namespace")
def by_namespace(policy: GroupPolicy, members: Sequence[Member],
                 inputs: AggregateInputs) -> AggregateOutcome:
    """One `Namespace/<name>` group per namespace with members, carrying the namespace's facts
    (labels, NetworkPolicy count) and the ids of its member workloads (`group.members`)."""
    by_key: dict[tuple[str | None, str], list[Resource]] = {}
    for member in members:
        if member.certain and member.resource.namespace:
            key = (member.resource.cluster, member.resource.namespace)
            by_key.setdefault(key, []).append(member.resource)
    groups = [_namespace_group(cluster, namespace, resources, inputs.door)
              for (cluster, namespace), resources in sorted(by_key.items(),
                                                           key=lambda item: str(item[0]))]
    return AggregateOutcome(groups=groups)


def _network_policy_count(resources: list[Resource]) -> int | None:
    """The namespace's NetworkPolicy count when its workloads agree on it; None otherwise."""
    counts = {r.workload.namespace_network_policies for r in resources if r.workload}
    known = {count for count in counts if count is not None}
    return known.pop() if len(known) == 1 and None not in counts else None


def _namespace_group(cluster: str | None, namespace: str, resources: list[Resource],
                     door: Door) -> Resource:
    first = resources[0]
    count = _network_policy_count(resources)
    return Resource(
        provider=first.provider,
        kind="Namespace",
        category=Category.OTHER,
        id=f"Namespace/{namespace}",
        name=namespace,
        cluster=cluster,
        namespace=namespace,
        tags=dict(first.namespace_labels),
        namespace_labels=dict(first.namespace_labels),
        state=State.RUNNING if any(r.state is State.RUNNING for r in resources) else first.state,
        workload=WorkloadSpec(namespace_network_policies=count),
        unknown=frozenset() if count is not None else frozenset(
            {"workload.namespace_network_policies"}),
        group=GroupFacts(door=door, members=sorted(r.id for r in resources)),
    )
