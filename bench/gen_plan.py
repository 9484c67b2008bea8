"""Generate a realistic `terraform show -json` plan with N resource changes (deterministic).

The plan mimics what Terraform 1.x prints for a GPU-heavy estate: resources in nested modules
(including `count` and `for_each` module calls), `count`-indexed instances, `tags`/`tags_all`
with provider default tags, `after_unknown` for computed attributes, `after_sensitive`,
`planned_values`, `prior_state` for resources that already exist, and the `configuration` block
with expressions, so a change weighs about 4 KB like real plans do.

    python bench/gen_plan.py                      # 5,000 changes → bench/out/plan-5000.json
    python bench/gen_plan.py -n 200 -o /tmp/p.json --seed 7
    python bench/gen_plan.py --empty -o bench/out/plan-empty.json
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CATALOG_CSV = REPO / "engine" / "data" / "catalog" / "gpu_instances.csv"
OUT_DIR = Path(__file__).resolve().parent / "out"
TERRAFORM_VERSION = "1.7.5"

AWS_PROVIDER = "registry.terraform.io/hashicorp/aws"
GOOGLE_PROVIDER = "registry.terraform.io/hashicorp/google"
AZURE_PROVIDER = "registry.terraform.io/hashicorp/azurerm"

AWS_PLAIN_TYPES = ("m5.large", "m5.xlarge", "m5.2xlarge", "t3.medium", "t3.large", "c5.2xlarge")
GCP_PLAIN_TYPES = ("e2-standard-4", "n2-standard-8", "n1-standard-8")
GCP_ATTACHABLE = ("nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-l4")
AZURE_PLAIN_SIZES = ("Standard_D4s_v5", "Standard_D8s_v5", "Standard_E4s_v5")
AWS_REGIONS = ("us-east-1", "us-west-2", "eu-west-1")
TEAMS = ("ml-research", "inference", "platform", "data", "vision", "speech")
PROJECTS = ("llm-pretrain", "ranking", "asr", "diffusion", "embeddings", "forecasting")
OFFHOURS = ("off=(M-F,19);on=(M-F,7);tz=pt", "off=[(M-F,21),(U,18)];on=[(M-F,6)];tz=et")

# type → share of the changes
TYPE_WEIGHTS: dict[str, int] = {
    "aws_instance": 25,
    "aws_ebs_volume": 14,
    "aws_autoscaling_group": 8,
    "aws_eks_node_group": 8,
    "google_compute_instance": 14,
    "google_container_node_pool": 8,
    "azurerm_linux_virtual_machine": 11,
    "aws_s3_bucket": 12,
}
MODULES_BY_PROVIDER: dict[str, tuple[str, ...]] = {
    "aws": (
        "",
        "module.training",
        "module.training.module.gpu_pool",
        'module.inference["us-east-1"]',
        'module.inference["eu-west-1"]',
        "module.data",
        "module.eks.module.node_groups[0]",
        "module.eks.module.node_groups[1]",
    ),
    "gcp": ("", "module.gke", "module.gke.module.pools[0]", "module.gke.module.pools[1]",
            "module.vertex_workbench"),
    "azure": ("", "module.azure_ml", 'module.azure_ml.module.compute["nc"]'),
}


def gpu_types(cloud: str) -> list[str]:
    """GPU instance types of one cloud from the shipped catalog."""
    with CATALOG_CSV.open(encoding="utf-8") as handle:
        return [row["instance_type"] for row in csv.DictReader(handle) if row["cloud"] == cloud]


@dataclass
class Change:
    """One resource instance of the plan, with everything the plan prints about it."""

    address: str
    module_address: str
    type: str
    name: str
    index: int | None
    provider: str
    actions: list[str]
    after: dict[str, Any]
    after_unknown: dict[str, Any]
    after_sensitive: dict[str, Any]


@dataclass
class Declaration:
    """One `resource` block: its configuration expressions and its instances."""

    module_address: str
    type: str
    name: str
    provider: str
    expressions: dict[str, Any]
    count: int | None
    changes: list[Change] = field(default_factory=list)


def const(value: Any) -> dict[str, Any]:
    return {"constant_value": value}


def refs(*names: str) -> dict[str, Any]:
    return {"references": list(names)}


def fake_id(rng: random.Random, prefix: str, length: int = 17) -> str:
    return prefix + "".join(rng.choice("0123456789abcdef") for _ in range(length))


Attributes = tuple[dict[str, Any], dict[str, Any]]  # (after, after_unknown)
Builder = Callable[["Declaration", int], Attributes]


class PlanBuilder:
    """Builds the plan document declaration by declaration, deterministically from a seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.aws_gpu = gpu_types("aws")
        self.gcp_gpu = gpu_types("gcp")
        self.azure_gpu = gpu_types("azure")
        self.declarations: list[Declaration] = []
        self.counter = 0
        self.builders: dict[str, Builder] = {
            "aws_instance": self.aws_instance,
            "aws_ebs_volume": self.aws_ebs_volume,
            "aws_autoscaling_group": self.aws_autoscaling_group,
            "aws_eks_node_group": self.aws_eks_node_group,
            "google_compute_instance": self.google_compute_instance,
            "google_container_node_pool": self.google_container_node_pool,
            "azurerm_linux_virtual_machine": self.azurerm_linux_virtual_machine,
            "aws_s3_bucket": self.aws_s3_bucket,
        }

    # -- shared pieces ---------------------------------------------------------------------

    def pick_type(self) -> str:
        return self.rng.choices(list(TYPE_WEIGHTS), list(TYPE_WEIGHTS.values()))[0]

    def cost_tags(self, name: str) -> dict[str, str]:
        """Tags as teams write them: mostly complete, some missing keys, some prod/exempt."""
        rng = self.rng
        tags = {"Name": name}
        roll = rng.random()
        if roll < 0.65:
            tags |= {"team": rng.choice(TEAMS), "project": rng.choice(PROJECTS),
                     "cost-center": f"cc-{rng.randint(1000, 9999)}"}
        elif roll < 0.85:
            tags |= {"team": rng.choice(TEAMS)}
        tags["env"] = rng.choices(("dev", "staging", "prod"), (5, 3, 2))[0]
        if rng.random() < 0.1:
            tags["gpuwarden-offhours"] = rng.choice(OFFHOURS)
        if rng.random() < 0.03:
            tags["gpuwarden.io/exempt"] = "gpu-spot-required"
        tags["owner"] = f"{rng.choice(TEAMS)}@example.com"
        return tags

    def default_tags(self) -> dict[str, str]:
        return {"managed-by": "terraform", "repository": "github.com/example/gpu-infra"}

    def action(self) -> list[str]:
        return self.rng.choices(
            (["create"], ["update"], ["delete", "create"], ["create", "delete"], ["no-op"],
             ["delete"]),
            (80, 7, 3, 2, 5, 3),
        )[0]

    # -- resource types: each returns (after, after_unknown) and fills expressions once ---------

    def aws_instance(self, decl: Declaration, index: int) -> Attributes:
        rng, exp = self.rng, decl.expressions
        if not exp:
            gpu = rng.random() < 0.55
            exp["instance_type"] = const(rng.choice(self.aws_gpu if gpu else AWS_PLAIN_TYPES))
            exp["ami"] = refs("data.aws_ami.deep_learning.id", "data.aws_ami.deep_learning")
            exp["subnet_id"] = refs("var.subnet_ids", f"{decl.module_address or 'var'}.subnet")
            exp["tags"] = const(self.cost_tags(decl.name))
            exp["key_name"] = const("ml-ops")
            exp["root_block_device"] = [{"volume_size": const(rng.choice((100, 200, 500))),
                                         "volume_type": const("gp3")}]
            if rng.random() < 0.6:
                exp["root_block_device"][0]["encrypted"] = const(rng.random() < 0.8)
            if rng.random() < 0.35:
                exp["instance_market_options"] = [{"market_type": const("spot")}]
            if rng.random() < 0.05:
                exp["instance_type"] = refs("data.external.sizing.result.type")
            exp["metadata_options"] = [{"http_tokens": const("required")}]
        tags = dict(exp["tags"]["constant_value"]) | {"Name": f"{decl.name}-{index}"}
        root: dict[str, Any] = {"delete_on_termination": True, "tags": None,
                                "volume_size": exp["root_block_device"][0]["volume_size"][
                                    "constant_value"], "volume_type": "gp3"}
        root_unknown: dict[str, Any] = {"device_name": True, "iops": True, "kms_key_id": True,
                                        "throughput": True, "volume_id": True, "tags_all": True}
        encrypted = exp["root_block_device"][0].get("encrypted")
        if encrypted is None:
            root_unknown["encrypted"] = True
        else:
            root["encrypted"] = encrypted["constant_value"]
        after: dict[str, Any] = {
            "ami": "ami-0" + hashlib.sha1(decl.name.encode()).hexdigest()[:16],
            "credit_specification": [], "get_password_data": False, "hibernation": None,
            "iam_instance_profile": "gpu-worker", "key_name": "ml-ops", "launch_template": [],
            "metadata_options": [{"http_endpoint": "enabled", "http_put_response_hop_limit": 2,
                                  "http_tokens": "required", "instance_metadata_tags": "disabled"}],
            "monitoring": True, "root_block_device": [root], "source_dest_check": True,
            "subnet_id": fake_id(self.rng, "subnet-"), "tags": tags,
            "tags_all": self.default_tags() | tags, "timeouts": None,
            "user_data": hashlib.sha1(f"{decl.name}{index}".encode()).hexdigest(),
            "user_data_replace_on_change": False, "volume_tags": None,
            "vpc_security_group_ids": [fake_id(self.rng, "sg-"), fake_id(self.rng, "sg-")],
        }
        unknown: dict[str, Any] = {
            "arn": True, "associate_public_ip_address": True, "availability_zone": True,
            "capacity_reservation_specification": True, "cpu_core_count": True,
            "cpu_options": True, "cpu_threads_per_core": True, "credit_specification": [],
            "disable_api_stop": True, "disable_api_termination": True, "ebs_block_device": True,
            "ebs_optimized": True, "enclave_options": True, "ephemeral_block_device": True,
            "host_id": True, "host_resource_group_arn": True, "id": True,
            "instance_initiated_shutdown_behavior": True, "instance_lifecycle": True,
            "instance_state": True, "ipv6_address_count": True, "ipv6_addresses": True,
            "launch_template": [], "maintenance_options": True, "metadata_options": [{}],
            "network_interface": True, "outpost_arn": True, "password_data": True,
            "placement_group": True, "placement_partition_number": True,
            "primary_network_interface_id": True, "private_dns": True,
            "private_dns_name_options": True, "private_ip": True, "public_dns": True,
            "public_ip": True, "root_block_device": [root_unknown],
            "secondary_private_ips": True, "security_groups": True,
            "spot_instance_request_id": True, "tags": {}, "tags_all": {}, "tenancy": True,
            "user_data_base64": True, "vpc_security_group_ids": [False, False],
        }
        if "constant_value" in exp["instance_type"]:
            after["instance_type"] = exp["instance_type"]["constant_value"]
        else:
            unknown["instance_type"] = True
        if "instance_market_options" in exp:
            after["instance_market_options"] = [{"market_type": "spot", "spot_options": [
                {"instance_interruption_behavior": "terminate", "max_price": "",
                 "spot_instance_type": "one-time"}]}]
            unknown["instance_market_options"] = [{"spot_options": [{"valid_until": True}]}]
        else:
            unknown["instance_market_options"] = True
        return after, unknown

    def aws_ebs_volume(self, decl: Declaration, index: int) -> Attributes:
        rng, exp = self.rng, decl.expressions
        if not exp:
            exp["availability_zone"] = const(rng.choice(AWS_REGIONS) + rng.choice("abc"))
            exp["size"] = const(rng.choice((100, 500, 1000, 4000)))
            exp["type"] = const(rng.choice(("gp3", "io2", "st1")))
            roll = rng.random()
            if roll < 0.6:
                exp["encrypted"] = const(True)
                if rng.random() < 0.4:
                    exp["kms_key_id"] = refs("aws_kms_key.data.arn", "aws_kms_key.data")
            elif roll < 0.8:
                exp["encrypted"] = const(False)
            exp["tags"] = const(self.cost_tags(decl.name))
        tags = dict(exp["tags"]["constant_value"])
        after: dict[str, Any] = {
            "availability_zone": exp["availability_zone"]["constant_value"],
            "final_snapshot": False, "multi_attach_enabled": False,
            "size": exp["size"]["constant_value"], "tags": tags,
            "tags_all": self.default_tags() | tags, "timeouts": None,
            "type": exp["type"]["constant_value"],
        }
        unknown: dict[str, Any] = {"arn": True, "id": True, "iops": True, "snapshot_id": True,
                                   "tags": {}, "tags_all": {}, "throughput": True}
        if "encrypted" in exp:
            after["encrypted"] = exp["encrypted"]["constant_value"]
        else:
            unknown["encrypted"] = True
        if "kms_key_id" in exp:
            unknown["kms_key_id"] = True
        else:
            unknown["kms_key_id"] = True if rng.random() < 0.5 else False  # noqa: SIM210
            if unknown["kms_key_id"] is False:
                after["kms_key_id"] = ""
        return after, unknown

    def aws_autoscaling_group(
        self, decl: Declaration, index: int
    ) -> Attributes:
        rng, exp = self.rng, decl.expressions
        if not exp:
            gpu = rng.random() < 0.7
            types = rng.sample(self.aws_gpu if gpu else list(AWS_PLAIN_TYPES), 2)
            on_demand_pct = rng.choice((0, 0, 100, 20))
            exp["max_size"] = const(rng.choice((4, 8, 16)))
            exp["min_size"] = const(0)
            exp["desired_capacity"] = const(rng.choice((1, 2, 4)))
            exp["vpc_zone_identifier"] = refs("var.private_subnets")
            exp["mixed_instances_policy"] = [{
                "instances_distribution": [{
                    "on_demand_base_capacity": const(0),
                    "on_demand_percentage_above_base_capacity": const(on_demand_pct),
                    "spot_allocation_strategy": const("price-capacity-optimized")}],
                "launch_template": [{
                    "launch_template_specification": [{
                        "launch_template_id": refs("aws_launch_template.gpu.id",
                                                   "aws_launch_template.gpu"),
                        "version": const("$Latest")}],
                    "override": [{"instance_type": const(t)} for t in types]}]}]
            exp["tag"] = [{"key": const(k), "value": const(v), "propagate_at_launch": const(True)}
                          for k, v in self.cost_tags(decl.name).items()]
        spec = exp["mixed_instances_policy"][0]
        distribution = spec["instances_distribution"][0]
        overrides = spec["launch_template"][0]["override"]
        after: dict[str, Any] = {
            "capacity_rebalance": True, "context": None, "default_instance_warmup": None,
            "desired_capacity": exp["desired_capacity"]["constant_value"],
            "desired_capacity_type": None, "enabled_metrics": None, "force_delete": False,
            "force_delete_warm_pool": False, "health_check_grace_period": 300,
            "health_check_type": "EC2", "initial_lifecycle_hook": [],
            "instance_maintenance_policy": [],
            "instance_refresh": [], "launch_configuration": None, "launch_template": [],
            "max_instance_lifetime": None, "max_size": exp["max_size"]["constant_value"],
            "metrics_granularity": "1Minute", "min_elb_capacity": None, "min_size": 0,
            "mixed_instances_policy": [{
                "instances_distribution": [{
                    "on_demand_allocation_strategy": "prioritized", "on_demand_base_capacity": 0,
                    "on_demand_percentage_above_base_capacity":
                        distribution["on_demand_percentage_above_base_capacity"]["constant_value"],
                    "spot_allocation_strategy": "price-capacity-optimized",
                    "spot_instance_pools": 0, "spot_max_price": ""}],
                "launch_template": [{
                    "launch_template_specification": [{"version": "$Latest"}],
                    "override": [{"instance_requirements": [], "instance_type":
                                  o["instance_type"]["constant_value"],
                                  "launch_template_specification": [], "weighted_capacity": "1"}
                                 for o in overrides]}]}],
            "name_prefix": f"{decl.name}-", "placement_group": None, "protect_from_scale_in": False,
            "suspended_processes": None,
            "tag": [{"key": t["key"]["constant_value"], "propagate_at_launch": True,
                     "value": t["value"]["constant_value"]} for t in exp["tag"]],
            "termination_policies": None, "timeouts": None, "traffic_source": [],
            "wait_for_capacity_timeout": "10m", "wait_for_elb_capacity": None, "warm_pool": [],
        }
        unknown: dict[str, Any] = {
            "arn": True, "availability_zones": True, "default_cooldown": True, "id": True,
            "load_balancers": True, "name": True, "predicted_capacity": True,
            "service_linked_role_arn": True, "target_group_arns": True,
            "vpc_zone_identifier": True, "warm_pool_size": True,
            "mixed_instances_policy": [{"instances_distribution": [{}], "launch_template": [{
                "launch_template_specification": [{"launch_template_id": True,
                                                   "launch_template_name": True}],
                "override": [{"instance_requirements": [], "launch_template_specification": []}
                             for _ in overrides]}]}],
            "tag": [{} for _ in exp["tag"]],
        }
        return after, unknown

    def aws_eks_node_group(
        self, decl: Declaration, index: int
    ) -> Attributes:
        rng, exp = self.rng, decl.expressions
        if not exp:
            gpu = rng.random() < 0.75
            exp["cluster_name"] = refs("module.eks.cluster_name", "module.eks")
            exp["node_role_arn"] = refs("aws_iam_role.nodes.arn", "aws_iam_role.nodes")
            exp["subnet_ids"] = refs("var.private_subnets")
            exp["instance_types"] = const([rng.choice(self.aws_gpu if gpu else AWS_PLAIN_TYPES)])
            exp["ami_type"] = const("AL2_x86_64_GPU" if gpu else "AL2_x86_64")
            roll = rng.random()
            if roll < 0.4:
                exp["capacity_type"] = const("SPOT")
            elif roll < 0.8:
                exp["capacity_type"] = const("ON_DEMAND")
            exp["scaling_config"] = [{"desired_size": const(rng.choice((1, 2, 3))),
                                      "max_size": const(10), "min_size": const(0)}]
            exp["labels"] = const({"workload": "training" if gpu else "system",
                                   "nvidia.com/gpu.present": str(gpu).lower()})
            exp["tags"] = const(self.cost_tags(decl.name))
        tags = dict(exp["tags"]["constant_value"])
        scaling = exp["scaling_config"][0]
        after: dict[str, Any] = {
            "ami_type": exp["ami_type"]["constant_value"], "cluster_name": "gpu-prod-1",
            "force_update_version": None, "instance_types": exp["instance_types"]["constant_value"],
            "labels": exp["labels"]["constant_value"], "launch_template": [],
            "node_group_name_prefix": f"{decl.name}-", "remote_access": [],
            "scaling_config": [{key: value["constant_value"] for key, value in scaling.items()}],
            "subnet_ids": [fake_id(rng, "subnet-") for _ in range(3)], "tags": tags,
            "tags_all": self.default_tags() | tags,
            "taint": [{"effect": "NO_SCHEDULE", "key": "nvidia.com/gpu", "value": "true"}],
            "timeouts": None, "update_config": [{"max_unavailable": 1,
                                                 "max_unavailable_percentage": 0}],
        }
        unknown: dict[str, Any] = {
            "arn": True, "disk_size": True, "id": True, "launch_template": [],
            "node_group_name": True, "release_version": True, "remote_access": [],
            "resources": True, "scaling_config": [{}], "status": True,
            "subnet_ids": [False, False, False], "tags": {}, "tags_all": {}, "taint": [{}],
            "update_config": [{}], "version": True, "node_role_arn": True,
            "labels": {}, "instance_types": [False],
        }
        if "capacity_type" in exp:
            after["capacity_type"] = exp["capacity_type"]["constant_value"]
        else:
            unknown["capacity_type"] = True
        return after, unknown

    def gcp_labels(self, name: str) -> dict[str, str]:
        """GCP labels: lowercase, no '/', '.' or ','."""
        tags = self.cost_tags(name)
        labels = {}
        for key, value in tags.items():
            key = key.lower().replace("/", "_").replace(".", "_")
            if key == "name":
                continue
            labels[key] = value.lower().replace("@", "_at_").replace(".", "_").replace(
                "(", "").replace(")", "").replace(";", "_").replace("=", "-").replace(",", "_")
        return labels

    def google_compute_instance(
        self, decl: Declaration, index: int
    ) -> Attributes:
        rng, exp = self.rng, decl.expressions
        if not exp:
            roll = rng.random()
            if roll < 0.45:
                exp["machine_type"] = const(rng.choice(self.gcp_gpu))
            elif roll < 0.7:
                exp["machine_type"] = const("n1-standard-8")
                exp["guest_accelerator"] = [{"type": const(rng.choice(GCP_ATTACHABLE)),
                                             "count": const(rng.choice((1, 2, 4)))}]
            else:
                exp["machine_type"] = const(rng.choice(GCP_PLAIN_TYPES))
            exp["zone"] = const(rng.choice(("us-central1-a", "us-central1-b", "europe-west4-a")))
            spot = rng.random() < 0.35
            exp["scheduling"] = [{"provisioning_model": const("SPOT" if spot else "STANDARD"),
                                  "preemptible": const(spot),
                                  "automatic_restart": const(not spot),
                                  "on_host_maintenance": const("TERMINATE")}]
            exp["labels"] = const(self.gcp_labels(decl.name))
            exp["boot_disk"] = [{"initialize_params": [{
                "image": const("projects/deeplearning-platform-release/global/images/family/"
                               "common-cu121-debian-11"), "size": const(200)}]}]
            exp["network_interface"] = [{"subnetwork": refs("google_compute_subnetwork.ml.id")}]
        scheduling = {key: value["constant_value"] for key, value in exp["scheduling"][0].items()}
        labels = dict(exp["labels"]["constant_value"])
        full_labels = labels | {"goog-terraform-provisioned": "true"}
        after: dict[str, Any] = {
            "advanced_machine_features": [], "allow_stopping_for_update": True,
            "attached_disk": [], "boot_disk": [{
                "auto_delete": True, "disk_encryption_key_raw": None, "initialize_params": [{
                    "enable_confidential_compute": None,
                    "image": exp["boot_disk"][0]["initialize_params"][0]["image"]["constant_value"],
                    "resource_manager_tags": None, "size": 200, "storage_pool": None}],
                "interface": None, "mode": "READ_WRITE"}],
            "can_ip_forward": False, "deletion_protection": False, "description": None,
            "desired_status": None, "enable_display": None, "hostname": None,
            "labels": labels, "machine_type": exp["machine_type"]["constant_value"],
            "metadata": {"enable-oslogin": "TRUE", "install-nvidia-driver": "True"},
            "metadata_startup_script": None, "name": f"{decl.name}-{index}",
            "network_interface": [{"access_config": [], "alias_ip_range": [],
                                   "ipv6_access_config": [], "network_ip": None,
                                   "nic_type": None, "queue_count": None}],
            "network_performance_config": [], "params": [], "resource_policies": None,
            "scheduling": [scheduling | {"instance_termination_action": "STOP" if scheduling[
                "preemptible"] else None, "local_ssd_recovery_timeout": [],
                "max_run_duration": [], "min_node_cpus": None, "node_affinities": [],
                "on_instance_stop_action": []}],
            "scratch_disk": [],
            "service_account": [{"email": "ml-runner@example.iam.gserviceaccount.com",
                                 "scopes": ["cloud-platform"]}],
            "shielded_instance_config": [{"enable_integrity_monitoring": True,
                                          "enable_secure_boot": False, "enable_vtpm": True}],
            "tags": ["gpu", "ssh"], "terraform_labels": full_labels, "timeouts": None,
            "zone": exp["zone"]["constant_value"],
        }
        unknown: dict[str, Any] = {
            "boot_disk": [{"device_name": True, "disk_encryption_key_sha256": True,
                           "initialize_params": [{"labels": True, "provisioned_iops": True,
                                                  "provisioned_throughput": True, "type": True}],
                           "kms_key_self_link": True, "source": True}],
            "confidential_instance_config": True, "cpu_platform": True, "current_status": True,
            "effective_labels": True, "guest_accelerator": True, "id": True, "instance_id": True,
            "label_fingerprint": True, "labels": {}, "metadata": {}, "metadata_fingerprint": True,
            "min_cpu_platform": True, "network_interface": [{
                "access_config": [], "alias_ip_range": [], "ipv6_access_config": [],
                "ipv6_access_type": True, "name": True, "network": True, "network_ip": True,
                "stack_type": True, "subnetwork": True, "subnetwork_project": True}],
            "project": True, "reservation_affinity": True, "scheduling": [{}],
            "self_link": True, "service_account": [{"scopes": [False]}],
            "shielded_instance_config": [{}], "tags": [False, False], "tags_fingerprint": True,
            "terraform_labels": {},
        }
        if "guest_accelerator" in exp:
            accel = exp["guest_accelerator"][0]
            after["guest_accelerator"] = [{"count": accel["count"]["constant_value"],
                                           "type": accel["type"]["constant_value"]}]
            unknown["guest_accelerator"] = [{}]
        return after, unknown

    def google_container_node_pool(
        self, decl: Declaration, index: int
    ) -> Attributes:
        rng, exp = self.rng, decl.expressions
        if not exp:
            roll = rng.random()
            node: dict[str, Any] = {"disk_size_gb": const(200), "disk_type": const("pd-balanced")}
            if roll < 0.45:
                node["machine_type"] = const(rng.choice(self.gcp_gpu))
            elif roll < 0.75:
                node["machine_type"] = const("n1-standard-8")
                node["guest_accelerator"] = [{"type": const(rng.choice(GCP_ATTACHABLE)),
                                              "count": const(1)}]
            else:
                node["machine_type"] = const(rng.choice(GCP_PLAIN_TYPES))
            node["spot"] = const(rng.random() < 0.4)
            node["resource_labels"] = const(self.gcp_labels(decl.name))
            node["labels"] = const({"pool": decl.name.replace("_", "-")})
            node["oauth_scopes"] = const(["https://www.googleapis.com/auth/cloud-platform"])
            exp["cluster"] = refs("google_container_cluster.ml.id", "google_container_cluster.ml")
            exp["location"] = const(rng.choice(("us-central1", "europe-west4")))
            exp["autoscaling"] = [{"min_node_count": const(rng.choice((0, 1))),
                                   "max_node_count": const(8)}]
            exp["node_config"] = [node]
        node_exp = exp["node_config"][0]
        node_after: dict[str, Any] = {
            "advanced_machine_features": [], "boot_disk_kms_key": None,
            "confidential_nodes": [], "containerd_config": [], "disk_size_gb": 200,
            "disk_type": "pd-balanced", "enable_confidential_storage": None,
            "ephemeral_storage_local_ssd_config": [], "fast_socket": [], "gcfs_config": [],
            "gvnic": [], "host_maintenance_policy": [], "image_type": "COS_CONTAINERD",
            "labels": node_exp["labels"]["constant_value"], "linux_node_config": [],
            "local_nvme_ssd_block_config": [], "local_ssd_count": 0,
            "machine_type": node_exp["machine_type"]["constant_value"],
            "metadata": {"disable-legacy-endpoints": "true"}, "min_cpu_platform": None,
            "node_group": None, "oauth_scopes": node_exp["oauth_scopes"]["constant_value"],
            "preemptible": False, "reservation_affinity": [],
            "resource_labels": node_exp["resource_labels"]["constant_value"],
            "resource_manager_tags": None, "secondary_boot_disks": [],
            "sole_tenant_config": [], "spot": node_exp["spot"]["constant_value"], "tags": None,
            "taint": [{"effect": "NO_SCHEDULE", "key": "nvidia.com/gpu", "value": "present"}],
        }
        node_unknown: dict[str, Any] = {
            "effective_taints": True, "guest_accelerator": True, "kubelet_config": True,
            "labels": {}, "logging_variant": True, "metadata": {}, "oauth_scopes": [False],
            "resource_labels": {}, "service_account": True, "shielded_instance_config": True,
            "taint": [{}], "workload_metadata_config": True,
        }
        if "guest_accelerator" in node_exp:
            accel = node_exp["guest_accelerator"][0]
            node_after["guest_accelerator"] = [{
                "count": accel["count"]["constant_value"], "gpu_driver_installation_config": [
                    {"gpu_driver_version": "LATEST"}], "gpu_partition_size": "",
                "gpu_sharing_config": [], "type": accel["type"]["constant_value"]}]
            node_unknown["guest_accelerator"] = [{"gpu_driver_installation_config": [{}],
                                                  "gpu_sharing_config": []}]
        autoscaling = exp["autoscaling"][0]
        after: dict[str, Any] = {
            "autoscaling": [{"location_policy": "ANY", "max_node_count": 8,
                             "min_node_count": autoscaling["min_node_count"]["constant_value"],
                             "total_max_node_count": None, "total_min_node_count": None}],
            "location": exp["location"]["constant_value"],
            "management": [{"auto_repair": True, "auto_upgrade": True}],
            "name": f"{decl.name.replace('_', '-')}-{index}", "network_config": [],
            "node_config": [node_after], "placement_policy": [], "queued_provisioning": [],
            "timeouts": None,
        }
        unknown: dict[str, Any] = {
            "autoscaling": [{}], "cluster": True, "id": True, "initial_node_count": True,
            "instance_group_urls": True, "managed_instance_group_urls": True,
            "management": [{}], "max_pods_per_node": True, "name_prefix": True,
            "network_config": [], "node_config": [node_unknown], "node_count": True,
            "node_locations": True, "operation": True, "project": True,
            "upgrade_settings": True, "version": True,
        }
        return after, unknown

    def azurerm_linux_virtual_machine(
        self, decl: Declaration, index: int
    ) -> Attributes:
        rng, exp = self.rng, decl.expressions
        if not exp:
            gpu = rng.random() < 0.6
            exp["size"] = const(rng.choice(self.azure_gpu if gpu else AZURE_PLAIN_SIZES))
            exp["location"] = const(rng.choice(("eastus", "westeurope", "southcentralus")))
            exp["resource_group_name"] = refs("azurerm_resource_group.ml.name")
            exp["admin_username"] = const("azureuser")
            exp["admin_password"] = refs("random_password.vm.result")
            if rng.random() < 0.35:
                exp["priority"] = const("Spot")
                exp["eviction_policy"] = const("Deallocate")
            elif rng.random() < 0.5:
                exp["priority"] = const("Regular")
            exp["os_disk"] = [{"caching": const("ReadWrite"),
                               "storage_account_type": const("Premium_LRS")}]
            exp["tags"] = const(self.cost_tags(decl.name))
        after: dict[str, Any] = {
            "additional_capabilities": [], "admin_ssh_key": [{
                "public_key": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC" + hashlib.sha256(
                    decl.name.encode()).hexdigest() * 4, "username": "azureuser"}],
            "admin_username": "azureuser", "allow_extension_operations": True,
            "availability_set_id": None, "boot_diagnostics": [],
            "capacity_reservation_group_id": None,
            "custom_data": None, "dedicated_host_group_id": None, "dedicated_host_id": None,
            "disable_password_authentication": False, "edge_zone": None,
            "encryption_at_host_enabled": None, "extensions_time_budget": "PT1H30M",
            "gallery_application": [], "identity": [], "license_type": None,
            "location": exp["location"]["constant_value"], "max_bid_price": -1,
            "name": f"{decl.name.replace('_', '-')}-{index}", "os_disk": [{
                "caching": "ReadWrite", "diff_disk_settings": [], "disk_encryption_set_id": None,
                "secure_vm_disk_encryption_set_id": None, "security_encryption_type": None,
                "storage_account_type": "Premium_LRS", "write_accelerator_enabled": False}],
            "patch_assessment_mode": "ImageDefault", "patch_mode": "ImageDefault", "plan": [],
            "platform_fault_domain": -1, "provision_vm_agent": True, "proximity_placement_group_id":
                None, "reboot_setting": None, "resource_group_name": "rg-ml-prod",
            "secret": [], "secure_boot_enabled": None, "size": exp["size"]["constant_value"],
            "source_image_id": None, "source_image_reference": [{
                "offer": "ubuntu-hpc", "publisher": "microsoft-dsvm", "sku": "2204",
                "version": "latest"}],
            "tags": dict(exp["tags"]["constant_value"]), "termination_notification": [],
            "timeouts": None, "user_data": None, "virtual_machine_scale_set_id": None,
            "vtpm_enabled": None, "zone": None,
        }
        unknown: dict[str, Any] = {
            "additional_capabilities": [], "admin_password": True, "admin_ssh_key": [{}],
            "boot_diagnostics": [], "computer_name": True, "gallery_application": [],
            "id": True, "identity": [], "network_interface_ids": True, "os_disk": [{
                "diff_disk_settings": [], "disk_size_gb": True, "name": True}],
            "plan": [], "private_ip_address": True, "private_ip_addresses": True,
            "public_ip_address": True, "public_ip_addresses": True, "secret": [],
            "source_image_reference": [{}], "tags": {}, "termination_notification": [],
            "virtual_machine_id": True,
        }
        for key in ("priority", "eviction_policy"):
            if key in exp:
                after[key] = exp[key]["constant_value"]
            elif key == "priority":
                after[key] = "Regular"
            else:
                after[key] = None
        return after, unknown

    def aws_s3_bucket(self, decl: Declaration, index: int) -> Attributes:
        rng, exp = self.rng, decl.expressions
        if not exp:
            exp["bucket"] = const(f"example-{decl.name.replace('_', '-')}")
            exp["force_destroy"] = const(False)
            exp["tags"] = const(self.cost_tags(decl.name))
            if rng.random() < 0.3:
                exp["server_side_encryption_configuration"] = [{"rule": [{
                    "apply_server_side_encryption_by_default": [{
                        "sse_algorithm": const("aws:kms"),
                        "kms_master_key_id": refs("aws_kms_key.s3.arn", "aws_kms_key.s3")}]}]}]
        tags = dict(exp["tags"]["constant_value"])
        bucket = exp["bucket"]["constant_value"] + (f"-{index}" if decl.count else "")
        after: dict[str, Any] = {"bucket": bucket, "force_destroy": False, "tags": tags,
                                 "tags_all": self.default_tags() | tags, "timeouts": None}
        unknown: dict[str, Any] = {
            "acceleration_status": True, "acl": True, "arn": True, "bucket_domain_name": True,
            "bucket_prefix": True, "bucket_regional_domain_name": True, "cors_rule": True,
            "grant": True, "hosted_zone_id": True, "id": True, "lifecycle_rule": True,
            "logging": True, "object_lock_configuration": True, "object_lock_enabled": True,
            "policy": True, "region": True, "replication_configuration": True,
            "request_payer": True, "tags": {}, "tags_all": {}, "versioning": True,
            "website": True, "website_domain": True, "website_endpoint": True,
        }
        if "server_side_encryption_configuration" in exp:
            after["server_side_encryption_configuration"] = [{"rule": [{
                "apply_server_side_encryption_by_default": [{"sse_algorithm": "aws:kms"}],
                "bucket_key_enabled": True}]}]
            unknown["server_side_encryption_configuration"] = [{"rule": [{
                "apply_server_side_encryption_by_default": [{"kms_master_key_id": True}]}]}]
        else:
            unknown["server_side_encryption_configuration"] = True
        return after, unknown

    # -- assembling -------------------------------------------------------------------------

    def add_declaration(self, remaining: int) -> int:
        """Add one resource block with 1..8 instances; returns how many changes it made."""
        rng = self.rng
        type_ = self.pick_type()
        provider = type_.split("_", 1)[0].replace("google", "gcp").replace("azurerm", "azure")
        module = rng.choice(MODULES_BY_PROVIDER[provider])
        self.counter += 1
        name = f"{type_.split('_', 1)[1]}_{self.counter}"
        count = rng.choice((None, None, None, 2, 3, 4, 8))
        instances = min(count or 1, remaining)
        if count is not None:
            count = instances
        decl = Declaration(module, type_, name, provider, {}, count)
        prefix = f"{module}." if module else ""
        for position in range(instances):
            index = position if count is not None else None
            after, unknown = self.builders[type_](decl, position)
            sensitive: dict[str, Any] = {}
            if type_ == "azurerm_linux_virtual_machine":
                sensitive = {"admin_password": True, "custom_data": True}
            elif type_ == "aws_instance" and rng.random() < 0.2:
                sensitive = {"user_data": True}
                after["user_data"] = None
            suffix = f"[{index}]" if index is not None else ""
            decl.changes.append(Change(
                address=f"{prefix}{type_}.{name}{suffix}", module_address=module, type=type_,
                name=name, index=index, provider=PROVIDERS[provider], actions=self.action(),
                after=after, after_unknown=unknown, after_sensitive=sensitive,
            ))
        self.declarations.append(decl)
        return instances

    def build(self, changes: int) -> dict[str, Any]:
        made = 0
        while made < changes:
            made += self.add_declaration(changes - made)
        all_changes = [c for d in self.declarations for c in d.changes]
        return {
            "format_version": "1.2",
            "terraform_version": TERRAFORM_VERSION,
            "variables": {"environment": {"value": "dev"},
                          "private_subnets": {"value": ["subnet-0a1", "subnet-0b2", "subnet-0c3"]}},
            "planned_values": {"root_module": self.module_tree(all_changes, planned=True)},
            "resource_changes": [resource_change(c) for c in all_changes],
            "prior_state": {
                "format_version": "1.0", "terraform_version": TERRAFORM_VERSION,
                "values": {"root_module": self.module_tree(all_changes, planned=False)},
            },
            "configuration": {"provider_config": provider_config(),
                              "root_module": self.configuration_tree()},
            "relevant_attributes": [
                {"resource": "module.eks.aws_eks_cluster.this", "attribute": ["endpoint"]},
            ],
            "timestamp": "2026-11-30T09:00:00Z",
            "applyable": True,
            "complete": True,
            "errored": False,
        }

    def module_tree(self, changes: list[Change], *, planned: bool) -> dict[str, Any]:
        """planned_values / prior_state: resources grouped into nested child_modules."""
        root: dict[str, Any] = {"resources": []}
        for change in changes:
            exists_before = change.actions != ["create"]
            exists_after = change.actions != ["delete"]
            if (planned and not exists_after) or (not planned and not exists_before):
                continue
            node = root
            parts = module_chain(change.module_address)
            for address in parts:
                children = node.setdefault("child_modules", [])
                found = next((c for c in children if c["address"] == address), None)
                if found is None:
                    found = {"address": address, "resources": []}
                    children.append(found)
                node = found
            node["resources"].append(state_resource(change, planned=planned))
        return root

    def configuration_tree(self) -> dict[str, Any]:
        root: dict[str, Any] = {"resources": []}
        for decl in self.declarations:
            node = root
            for name in module_call_names(decl.module_address):
                calls = node.setdefault("module_calls", {})
                call = calls.setdefault(name, {"source": f"./modules/{name}",
                                               "expressions": {"environment":
                                                               refs("var.environment")},
                                               "module": {"resources": []}})
                node = call["module"]
            entry: dict[str, Any] = {
                "address": f"{decl.type}.{decl.name}", "mode": "managed", "type": decl.type,
                "name": decl.name, "provider_config_key": decl.provider.replace(
                    "gcp", "google").replace("azure", "azurerm"),
                "expressions": decl.expressions, "schema_version": 1,
            }
            if decl.count is not None:
                entry["count_expression"] = const(decl.count)
            node["resources"].append(entry)
        return root


PROVIDERS = {"aws": AWS_PROVIDER, "gcp": GOOGLE_PROVIDER, "azure": AZURE_PROVIDER}


def module_chain(module_address: str) -> list[str]:
    """`module.a.module.b[0]` → [`module.a`, `module.a.module.b[0]`]."""
    if not module_address:
        return []
    pieces = module_address.split(".module.")
    chain, current = [], ""
    for position, piece in enumerate(pieces):
        current = piece if position == 0 else f"{current}.module.{piece}"
        chain.append(current)
    return chain


def module_call_names(module_address: str) -> list[str]:
    """`module.a.module.b[0]` → [`a`, `b`] (configuration is keyed by call name, no index)."""
    if not module_address:
        return []
    return [piece.removeprefix("module.").split("[", 1)[0]
            for piece in module_address.split(".module.")]


def without_unknowns(after: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in after.items() if value is not None}


def sensitive_skeleton(change: Change) -> dict[str, Any]:
    return dict(change.after_sensitive)


def state_resource(change: Change, *, planned: bool) -> dict[str, Any]:
    values = without_unknowns(change.after)
    if not planned:
        values = values | {"id": f"{change.name}-{change.index or 0}-existing",
                           "arn": f"arn:aws:ec2:us-east-1:123456789012:{change.name}"}
    entry: dict[str, Any] = {
        "address": change.address, "mode": "managed", "type": change.type, "name": change.name,
        "provider_name": change.provider, "schema_version": 1, "values": values,
        "sensitive_values": sensitive_skeleton(change),
    }
    if change.index is not None:
        entry["index"] = change.index
    return entry


def resource_change(change: Change) -> dict[str, Any]:
    actions = change.actions
    before = None
    if actions != ["create"]:
        before = without_unknowns(change.after) | {"id": f"{change.name}-existing"}
    after: dict[str, Any] | None = change.after
    after_unknown: dict[str, Any] = change.after_unknown
    if actions == ["delete"]:
        after, after_unknown = None, {}
    elif actions == ["no-op"]:
        after, after_unknown = before, {}
    entry: dict[str, Any] = {"address": change.address}
    if change.module_address:
        entry["module_address"] = change.module_address
    entry |= {"mode": "managed", "type": change.type, "name": change.name}
    if change.index is not None:
        entry["index"] = change.index
    entry |= {
        "provider_name": change.provider,
        "change": {
            "actions": actions, "before": before, "after": after,
            "after_unknown": after_unknown,
            "before_sensitive": False if before is None else change.after_sensitive,
            "after_sensitive": False if after is None else change.after_sensitive,
        },
    }
    if actions in (["delete", "create"], ["create", "delete"]):
        entry["action_reason"] = "replace_because_cannot_update"
        entry["change"]["replace_paths"] = [["ami"]]
    return entry


def provider_config() -> dict[str, Any]:
    return {
        "aws": {"name": "aws", "full_name": AWS_PROVIDER, "version_constraint": "~> 5.40",
                "expressions": {"region": const("us-east-1"), "default_tags": [
                    {"tags": const({"managed-by": "terraform",
                                    "repository": "github.com/example/gpu-infra"})}]}},
        "google": {"name": "google", "full_name": GOOGLE_PROVIDER,
                   "expressions": {"project": const("example-ml"), "region": const("us-central1")}},
        "azurerm": {"name": "azurerm", "full_name": AZURE_PROVIDER,
                    "expressions": {"features": [{}]}},
    }


def generate_plan(changes: int = 5000, seed: int = 42) -> dict[str, Any]:
    """A plan document with exactly `changes` resource changes."""
    return PlanBuilder(seed).build(changes)


def empty_plan() -> dict[str, Any]:
    """A valid plan with nothing to change (no `resource_changes`)."""
    return {
        "format_version": "1.2", "terraform_version": TERRAFORM_VERSION,
        "planned_values": {"root_module": {}},
        "configuration": {"provider_config": provider_config(), "root_module": {}},
        "timestamp": "2026-11-30T09:00:00Z", "applyable": False, "complete": True,
        "errored": False,
    }


def write_plan(path: Path, document: dict[str, Any]) -> int:
    """Write compactly, as `terraform show -json` does; returns the size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(document, separators=(",", ":")).encode("utf-8")
    path.write_bytes(data)
    return len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--changes", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--empty", action="store_true", help="write a plan with no changes")
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    name = "plan-empty.json" if args.empty else f"plan-{args.changes}.json"
    output = args.output or OUT_DIR / name
    document = empty_plan() if args.empty else generate_plan(args.changes, args.seed)
    size = write_plan(output, document)
    count = len(document.get("resource_changes", []))
    print(f"{output}: {count} changes, {size / 1e6:.1f} MB ({size / max(count, 1):.0f} B/change)")


if __name__ == "__main__":
    main()
