"""One scanned (account, region) as the normalizers see it: its sections, the joins between them
(launch templates by id and name, the groups that stand for their instances, AWS managed keys),
and the `Resource` factory that fills in provider, account, region and the catalog's figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from engine.core.catalog import Catalog
from engine.core.enrich import enrich
from engine.core.model import Resource
from engine.sources.aws.spot_market import region_spot_prices

ASG_MEMBER_TAG = "aws:autoscaling:groupName"
TYPE_UNKNOWN = frozenset({"instance_type", "gpu", "hourly_usd"})


def tags(value: Any) -> dict[str, str]:
    """EC2/SageMaker `[{Key, Value}]` lists and EKS `{key: value}` maps alike."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return {str(t["Key"]): str(t.get("Value") or "") for t in value
                if isinstance(t, Mapping) and t.get("Key")}
    return {}


def name(tag_map: Mapping[str, str], fallback: str) -> str:
    return tag_map.get("Name") or fallback


def _enrich(resource: Resource, catalog: Catalog) -> Resource:
    """Catalog GPU spec and price; an `ml.` type is priced as the EC2 type it runs on."""
    instance_type = resource.instance_type
    if instance_type and instance_type.startswith("ml."):
        ec2 = resource.model_copy(update={"instance_type": instance_type[3:]})
        return enrich(ec2, catalog).model_copy(update={"instance_type": instance_type})
    return enrich(resource, catalog)


@dataclass(frozen=True)
class Region:
    """One scanned (account, region), with the joins its normalizers need."""

    scan: Mapping[str, Any]
    catalog: Catalog

    @property
    def account(self) -> str | None:
        value = self.scan.get("account")
        return str(value) if value else None

    @property
    def region(self) -> str | None:
        value = self.scan.get("region")
        return str(value) if value else None

    def items(self, section: str) -> list[dict[str, Any]]:
        value = self.scan.get(section)
        return [item for item in value if isinstance(item, dict)] if isinstance(value, list) \
            else []

    def resource(self, **fields: Any) -> Resource:
        fields.setdefault("name", fields["id"])
        market = self.spot_market.get(fields.get("instance_type") or "")
        if market:
            fields["spot_hourly_usd"] = market[0]
        return _enrich(Resource(provider="aws", region=self.region, account=self.account,
                                **fields), self.catalog)

    @cached_property
    def spot_market(self) -> dict[str, tuple[float, str]]:
        """The region's live spot price of each GPU type it runs (`spot_prices` section)."""
        return region_spot_prices(self.scan, self.catalog)

    @cached_property
    def instances(self) -> dict[str, dict[str, Any]]:
        """Instances by id."""
        return {str(i.get("InstanceId")): i for i in self.items("instances")}

    @cached_property
    def templates(self) -> dict[str, dict[str, Any]]:
        """Launch templates by id and by name."""
        found: dict[str, dict[str, Any]] = {}
        for template in self.items("launch_templates"):
            for key in ("LaunchTemplateId", "LaunchTemplateName"):
                if template.get(key):
                    found[str(template[key])] = template
        return found

    @cached_property
    def aws_managed_keys(self) -> frozenset[str] | None:
        if "kms_aws_managed_aliases" not in self.scan:
            return None
        return frozenset(str(a.get("TargetKeyId")) for a in self.items("kms_aws_managed_aliases"))

    @cached_property
    def launch_configurations(self) -> dict[str, dict[str, Any]]:
        return {str(c.get("LaunchConfigurationName")): c
                for c in self.items("launch_configurations")}

    @cached_property
    def asg_members(self) -> frozenset[str]:
        """Ids of the instances the autoscaling groups list."""
        return frozenset(str(i.get("InstanceId")) for g in self.items("autoscaling_groups")
                         for i in g.get("Instances") or [] if isinstance(i, Mapping))

    @cached_property
    def group_instances(self) -> dict[str, tuple[str, ...]]:
        """The instance ids each autoscaling group lists (`Instances`), by group name."""
        return {str(g.get("AutoScalingGroupName")): _instance_ids(g)
                for g in self.items("autoscaling_groups")}

    def node_group_instances(self, group: Mapping[str, Any]) -> tuple[str, ...]:
        """The instance ids of the autoscaling groups EKS runs a node group on."""
        return tuple(member for asg in (group.get("resources") or {}).get("autoScalingGroups")
                     or [] if isinstance(asg, Mapping)
                     for member in self.group_instances.get(str(asg.get("name")), ()))

    @cached_property
    def eks_managed_groups(self) -> frozenset[str]:
        """Names of the autoscaling groups EKS manages for its node groups."""
        return frozenset(str(asg.get("name")) for group in self.items("node_groups")
                         for asg in (group.get("resources") or {}).get("autoScalingGroups") or []
                         if isinstance(asg, Mapping))


def _instance_ids(group: Mapping[str, Any]) -> tuple[str, ...]:
    listed = group.get("Instances")
    return tuple(str(i["InstanceId"]) for i in listed if isinstance(i, Mapping)
                 and i.get("InstanceId")) if isinstance(listed, list) else ()
