"""Where a pod can be placed: the node-selector terms of its nodeSelector and required node
affinity, and the capacity (spot or on-demand) those terms pin it to, with each cloud's spot
node labels and the tolerations its spot taints need.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.core.model import Capacity
from engine.sources.kubernetes.objects import as_list, as_mapping, string_map

# The spot node label of each cloud, as the mutating webhook writes it: (key, value).
SPOT_LABELS: dict[str, tuple[str, str]] = {
    "aws": ("karpenter.sh/capacity-type", "spot"),
    "eks": ("eks.amazonaws.com/capacityType", "SPOT"),
    "gke": ("cloud.google.com/gke-spot", "true"),
    "azure": ("kubernetes.azure.com/scalesetpriority", "spot"),
}

# Taints a cloud puts on its spot nodes by default, hence the toleration a pod pinned there needs.
SPOT_TOLERATIONS: dict[str, tuple[dict[str, str], ...]] = {
    "aws": (),
    "eks": (),
    "gke": (
        {
            "key": "cloud.google.com/gke-spot",
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        },
    ),
    "azure": (
        {
            "key": "kubernetes.azure.com/scalesetpriority",
            "operator": "Equal",
            "value": "spot",
            "effect": "NoSchedule",
        },
    ),
}

# Every label that marks a node as spot/preemptible: key -> (spot value, `Exists` means spot).
# `Exists` is only meaningful for labels that on-demand nodes do not carry at all.
_SPOT_NODE_LABELS: dict[str, tuple[str, bool]] = {
    "karpenter.sh/capacity-type": ("spot", False),
    "eks.amazonaws.com/capacityType": ("SPOT", False),
    "cloud.google.com/gke-spot": ("true", True),
    "cloud.google.com/gke-preemptible": ("true", True),
    "kubernetes.azure.com/scalesetpriority": ("spot", True),
    "cloud.google.com/gke-provisioning": ("spot", False),
}

# One alternative a pod may schedule onto: (key, operator, values) requirements that must all hold.
Term = list[tuple[str, str, tuple[str, ...]]]


def node_requirements(pod_spec: dict[str, Any]) -> list[Term]:
    """The node-selector terms a pod can schedule onto (ORed), each a list of ANDed requirements.

    nodeSelector entries hold in every term; preferred affinity constrains nothing.
    """
    selector: Term = [
        (key, "In", (value,)) for key, value in string_map(pod_spec.get("nodeSelector")).items()
    ]
    node_affinity = as_mapping(as_mapping(pod_spec.get("affinity")).get("nodeAffinity"))
    required = as_mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = [_affinity_term(term) for term in as_list(required.get("nodeSelectorTerms"))]
    if not terms:
        return [selector]
    return [selector + term for term in terms]


def _affinity_term(term: Any) -> Term:
    requirements: Term = []
    for expression in as_list(as_mapping(term).get("matchExpressions")):
        expression = as_mapping(expression)
        key, operator = expression.get("key"), expression.get("operator")
        if not (isinstance(key, str) and isinstance(operator, str)):
            continue
        values = tuple(v for v in as_list(expression.get("values")) if isinstance(v, str))
        requirements.append((key, operator, values))
    return requirements


def every_term(terms: list[Term], holds: Callable[[str, str, tuple[str, ...]], bool]) -> bool:
    return all(any(holds(*requirement) for requirement in term) for term in terms)


def workload_capacity(pod_spec: dict[str, Any]) -> Capacity:
    """SPOT when every schedulable term pins a spot capacity label, else ON_DEMAND."""
    terms = node_requirements(pod_spec)
    return Capacity.SPOT if every_term(terms, _requires_spot) else Capacity.ON_DEMAND


def _requires_spot(key: str, operator: str, values: tuple[str, ...]) -> bool:
    if key not in _SPOT_NODE_LABELS:
        return False
    spot_value, exists_means_spot = _SPOT_NODE_LABELS[key]
    if operator == "In":
        return bool(values) and all(value == spot_value for value in values)
    return operator == "Exists" and exists_means_spot


def pinned_value(terms: list[Term], key: str) -> str | None:
    """The single value every term requires for `key` (`In` with one value), else None."""
    pinned: set[str] = set()
    for term in terms:
        values = {v[0] for k, op, v in term if k == key and op == "In" and len(v) == 1}
        if len(values) != 1:
            return None
        pinned |= values
    return pinned.pop() if len(pinned) == 1 else None
