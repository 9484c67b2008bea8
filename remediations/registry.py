"""Remediation actions by name (planning picks one for a finding: `remediations.planning`).

An action is either advice (what to change, e.g. the Terraform attribute to set) or a mutating
action (stop, scale to zero, tag) that the enforcement runner may apply in enforce mode. The
names are the policy language's (`engine.core.policy.REMEDIATION_ACTIONS`, which validates a
policy's `remediations:`); registering any other name is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.core.model import Category, Resource
from engine.core.policy import REMEDIATION_ACTIONS

Advice = Callable[[Resource, dict[str, Any]], str]


@dataclass(frozen=True, slots=True)
class Action:
    name: str
    description: str
    mutating: bool
    advise: Advice


ACTIONS: dict[str, Action] = {}


def action(name: str, description: str, *, mutating: bool) -> Callable[[Advice], Advice]:
    if name not in REMEDIATION_ACTIONS:
        raise ValueError(f"remediation action {name!r} is not in the policy language "
                         "(engine.core.policy.REMEDIATION_ACTIONS)")

    def register(func: Advice) -> Advice:
        ACTIONS[name] = Action(name, description, mutating, func)
        return func

    return register


_SPOT_CHANGE = {
    "aws_instance": 'instance_market_options { market_type = "spot" }',
    "aws_launch_template": 'instance_market_options { market_type = "spot" }',
    "aws_autoscaling_group": "mixed_instances_policy.instances_distribution "
    "{ on_demand_base_capacity = 0, on_demand_percentage_above_base_capacity = 0 }",
    "aws_eks_node_group": 'capacity_type = "SPOT"',
    "google_compute_instance": 'scheduling { provisioning_model = "SPOT" }',
    "google_container_node_pool": "node_config { spot = true }",
    "azurerm_linux_virtual_machine": 'priority = "Spot" and eviction_policy = "Deallocate"',
    "azurerm_windows_virtual_machine": 'priority = "Spot" and eviction_policy = "Deallocate"',
    "azurerm_kubernetes_cluster_node_pool": 'priority = "Spot"',
}


@action("advise-spot", "Move the capacity to spot/preemptible", mutating=False)
def _advise_spot(resource: Resource, details: dict[str, Any]) -> str:
    if resource.category is Category.WORKLOAD:
        return ("add a nodeSelector on your cloud's spot capacity label (e.g. "
                "karpenter.sh/capacity-type: spot) and its toleration; the mutating webhook "
                "can patch it")
    change = _SPOT_CHANGE.get(resource.kind)
    if change:
        return f"set {change} in {resource.kind}; running instances must be replaced"
    if resource.category is Category.TRAINING_JOB:
        return "enable managed spot training (EnableManagedSpotTraining with a checkpoint S3 URI)"
    return "recreate it on spot/preemptible capacity"


@action("advise-tags", "Add the missing cost-allocation tags", mutating=False)
def _advise_tags(resource: Resource, details: dict[str, Any]) -> str:
    missing = details.get("missing_tags") or []
    where = "labels" if resource.provider in ("gcp", "kubernetes") else "tags"
    return f"add {where}: {', '.join(missing) or 'the required keys'}"


@action("advise-encryption", "Encrypt the storage at rest", mutating=False)
def _advise_encryption(resource: Resource, details: dict[str, Any]) -> str:
    if resource.kind in ("aws_s3_bucket",):
        return "add an aws_s3_bucket_server_side_encryption_configuration (aws:kms for a CMK)"
    if resource.provider == "aws":
        return "set encrypted = true (and kms_key_id for a customer key); existing volumes " \
               "must be copied through an encrypted snapshot"
    return "use a customer-managed key (disk encryption set / CMEK)"


@action("advise-mig", "Request a MIG slice instead of a whole GPU", mutating=False)
def _advise_mig(resource: Resource, details: dict[str, Any]) -> str:
    target = details.get("mig_resource")
    if target:
        return f"request {target}: 1 instead of nvidia.com/gpu (the mutating webhook can swap it)"
    return "declare gpuwarden.io/gpu-memory so the fitting MIG profile can be chosen"


@action("stop", "Stop the instance / deallocate the VM / scale the workload to zero",
        mutating=True)
def _stop(resource: Resource, details: dict[str, Any]) -> str:
    if resource.category in (Category.WORKLOAD, Category.AUTOSCALING_GROUP, Category.NODE_GROUP):
        return f"scale {resource.id} to zero (previous size {resource.count} recorded)"
    return f"stop {resource.id}"


@action("mark-violation", "Tag the resource with the violation and a date", mutating=True)
def _mark(resource: Resource, details: dict[str, Any]) -> str:
    return f"tag {resource.id} gpuwarden:violation=<policy>@<date>"
