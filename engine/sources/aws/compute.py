"""Compute: EC2 instances, launch templates (and their disks), autoscaling groups (and the
launch configurations they use), EKS managed node groups.

- Instances launched by an autoscaling group (tag `aws:autoscaling:groupName`, or listed by the
  group) are left out: the group stands for them, as a controller stands for its pods, so their
  spend is not counted twice. Autoscaling groups that EKS manages for a node group are left out
  for the same reason. Terminated and shutting-down instances are not listed.
- Reserved (prepaid): an instance in a capacity reservation (`CapacityReservationId`) or a
  Capacity Block (`InstanceLifecycle == "capacity-block"`); a launch template whose market type is
  `capacity-block` or that targets a reservation; an EKS node group `CAPACITY_BLOCK`.
- Spot: `InstanceLifecycle == "spot"`; a launch template's `InstanceMarketOptions.MarketType`;
  an autoscaling group's mixed instances distribution (no on-demand base, 0% on-demand above
  it), else its launch template or launch configuration (`SpotPrice`); EKS `capacityType`.
- A launch template disk that leaves `Encrypted` unset follows the region's EBS
  encryption-by-default setting.
- Autoscaling group tags are those propagated to instances, plus environment tags
  (`engine.core.labels.is_environment_key`) and `gpuwarden*` control tags whatever their
  propagation: a production marker on the group must protect the group itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.core.labels import is_environment_key
from engine.core.model import Capacity, Category, Resource, State
from engine.sources.aws.reading import pages, plain
from engine.sources.aws.region import ASG_MEMBER_TAG, TYPE_UNKNOWN, Region, name, tags
from engine.sources.aws.section import section
from engine.sources.aws.storage import customer_key

_EKS_DEFAULT_INSTANCE_TYPE = "t3.medium"
_INSTANCE_STATES = {"pending": State.RUNNING, "running": State.RUNNING,
                    "stopping": State.STOPPED, "stopped": State.STOPPED}


# ---------------------------------------------------------------------------- reading


def _instances(ec2: Any) -> list[dict[str, Any]]:
    live = ["pending", "running", "stopping", "stopped"]
    reservations = pages(ec2, "describe_instances", "Reservations",
                         Filters=[{"Name": "instance-state-name", "Values": live}])
    return [plain(i) for reservation in reservations for i in reservation.get("Instances") or []]


def _launch_templates(ec2: Any) -> list[dict[str, Any]]:
    """Each template with its latest (and default, when different) version."""
    templates = []
    for template in pages(ec2, "describe_launch_templates", "LaunchTemplates"):
        versions = ec2.describe_launch_template_versions(
            LaunchTemplateId=template["LaunchTemplateId"], Versions=["$Latest", "$Default"]
        ).get("LaunchTemplateVersions") or []
        unique = {v.get("VersionNumber"): v for v in versions}
        templates.append(plain({**template, "Versions": list(unique.values())}))
    return templates


def _autoscaling_groups(autoscaling: Any) -> list[dict[str, Any]]:
    return [plain(g) for g in pages(autoscaling, "describe_auto_scaling_groups",
                                    "AutoScalingGroups")]


def _launch_configurations(autoscaling: Any, groups: list[dict[str, Any]]
                           ) -> list[dict[str, Any]]:
    """The launch configurations the groups use (only those: they are a legacy)."""
    names = sorted({g["LaunchConfigurationName"] for g in groups
                    if g.get("LaunchConfigurationName")})
    found: list[dict[str, Any]] = []
    for start in range(0, len(names), 50):
        found.extend(plain(c) for c in pages(
            autoscaling, "describe_launch_configurations", "LaunchConfigurations",
            LaunchConfigurationNames=names[start:start + 50]))
    return found


def _node_groups(eks: Any) -> list[dict[str, Any]]:
    groups = []
    for cluster in pages(eks, "list_clusters", "clusters"):
        for group in pages(eks, "list_nodegroups", "nodegroups", clusterName=cluster):
            described = eks.describe_nodegroup(clusterName=cluster, nodegroupName=group)
            groups.append(plain(described["nodegroup"]))
    return groups


# ---------------------------------------------------------------------------- EC2 instances


def _live_instances(region: Region) -> Iterable[Mapping[str, Any]]:
    """Instances by id, without those an autoscaling group stands for."""
    groups_read = "autoscaling_groups" in region.scan
    return [i for i in region.instances.values() if not _is_asg_member(region, i, groups_read)]


def _is_asg_member(region: Region, instance: Mapping[str, Any], groups_read: bool) -> bool:
    if not groups_read:
        return False  # no group was read to stand for it: keep its spend visible
    return (instance.get("InstanceId") in region.asg_members
            or ASG_MEMBER_TAG in tags(instance.get("Tags")))


def instance_resource(region: Region, instance: Mapping[str, Any]) -> Resource:
    tag_map = tags(instance.get("Tags"))
    instance_id = str(instance["InstanceId"])
    state = str((instance.get("State") or {}).get("Name") or "")
    return region.resource(
        kind="aws_instance", category=Category.INSTANCE, id=instance_id,
        name=name(tag_map, instance_id), tags=tag_map, instance_type=instance.get("InstanceType"),
        capacity=_instance_capacity(instance),
        state=_INSTANCE_STATES.get(state, State.UNKNOWN), raw=dict(instance),
    )


# ---------------------------------------------------------------------------- launch templates


def template_version(template: Mapping[str, Any], version: Any = "$Latest") -> dict[str, Any]:
    """The launch template data of `version` ($Latest, $Default or a number) when it was read,
    else of the latest version read."""
    versions = [v for v in template.get("Versions") or [] if isinstance(v, Mapping)]
    if not versions:
        return {}
    chosen: Mapping[str, Any] | None = None
    if version == "$Default":
        chosen = next((v for v in versions if v.get("DefaultVersion")), None)
    elif version not in (None, "$Latest"):
        chosen = next((v for v in versions if str(v.get("VersionNumber")) == str(version)), None)
    if chosen is None:
        chosen = max(versions, key=lambda v: int(v.get("VersionNumber") or 0))
    data = chosen.get("LaunchTemplateData")
    return dict(data) if isinstance(data, Mapping) else {}


def _instance_capacity(instance: Mapping[str, Any]) -> Capacity:
    lifecycle = str(instance.get("InstanceLifecycle") or "").lower()
    if lifecycle == "spot":
        return Capacity.SPOT
    if lifecycle == "capacity-block" or instance.get("CapacityReservationId"):
        return Capacity.RESERVED
    return Capacity.ON_DEMAND


def _market_capacity(data: Mapping[str, Any]) -> Capacity:
    market = str((data.get("InstanceMarketOptions") or {}).get("MarketType")).lower()
    if market == "spot":
        return Capacity.SPOT
    reservation = data.get("CapacityReservationSpecification") or {}
    target = reservation.get("CapacityReservationTarget") if isinstance(reservation, Mapping) \
        else None
    return Capacity.RESERVED if market == "capacity-block" or target else Capacity.ON_DEMAND


def _instance_tag_specifications(data: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for spec in data.get("TagSpecifications") or []:
        if isinstance(spec, Mapping) and spec.get("ResourceType") in (None, "instance"):
            found.update(tags(spec.get("Tags")))
    return found


def launch_template_resources(region: Region, template: Mapping[str, Any]) -> list[Resource]:
    data = template_version(template)
    tag_map = {**tags(template.get("Tags")), **_instance_tag_specifications(data)}
    template_id = str(template["LaunchTemplateId"])
    resource = region.resource(
        kind="aws_launch_template", category=Category.LAUNCH_TEMPLATE, id=template_id,
        name=str(template.get("LaunchTemplateName") or template_id), tags=tag_map,
        instance_type=data.get("InstanceType"), capacity=_market_capacity(data),
        raw=dict(template),
    )
    disks = [
        _template_disk(region, resource, position, mapping["Ebs"])
        for position, mapping in enumerate(data.get("BlockDeviceMappings") or [])
        if isinstance(mapping, Mapping) and isinstance(mapping.get("Ebs"), Mapping)
    ]
    return [resource, *disks]


def _disk_encrypted(ebs: Mapping[str, Any], by_default: Any) -> bool | None:
    """Unset `Encrypted` follows the region's default; a disk from a snapshot inherits the
    snapshot's encryption: unknown."""
    explicit = ebs.get("Encrypted")
    if isinstance(explicit, bool):
        return explicit
    if by_default is True:
        return True
    if by_default is False and not ebs.get("SnapshotId"):
        return False
    return None


def _template_disk(region: Region, template: Resource, position: int,
                   ebs: Mapping[str, Any]) -> Resource:
    """A launch template's EBS mapping. Encrypted without a KmsKeyId uses the account's default
    EBS key, which may be a customer key: unknown."""
    encrypted = _disk_encrypted(ebs, region.scan.get("ebs_encryption_by_default"))
    key: bool | None = None
    if encrypted is False:
        key = False
    elif encrypted and ebs.get("KmsKeyId"):
        key = customer_key(ebs["KmsKeyId"], region.aws_managed_keys)
    unknown = {field for field, value in (("encrypted", encrypted), ("customer_key", key))
               if value is None}
    return region.resource(
        kind="aws_launch_template.block_device_mappings", category=Category.VOLUME,
        id=f"{template.id}.block_device_mappings[{position}]", tags=dict(template.tags),
        encrypted=encrypted, customer_key=key, unknown=frozenset(unknown), raw=dict(ebs),
    )


# ---------------------------------------------------------------------------- autoscaling


def _asg_tags(group: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for tag in group.get("Tags") or []:
        if not isinstance(tag, Mapping) or not tag.get("Key"):
            continue
        key = str(tag["Key"])
        if (tag.get("PropagateAtLaunch") is not False or is_environment_key(key)
                or key.lower().startswith("gpuwarden")):
            found[key] = str(tag.get("Value") or "")
    return found


def _distribution_capacity(policy: Mapping[str, Any]) -> Capacity:
    """All spot when no on-demand base and 0% on-demand above it (AWS defaults: 0 and 100)."""
    distribution = policy.get("InstancesDistribution") or {}
    base = distribution.get("OnDemandBaseCapacity", 0)
    above = distribution.get("OnDemandPercentageAboveBaseCapacity", 100)
    return Capacity.SPOT if (base or 0) == 0 and (above or 0) == 0 else Capacity.ON_DEMAND


def _template_data(region: Region, spec: Any) -> dict[str, Any] | None:
    """The launch template data a group's template specification names, None when unread."""
    if not isinstance(spec, Mapping) or not spec:
        return None
    template = region.templates.get(str(spec.get("LaunchTemplateId"))) \
        or region.templates.get(str(spec.get("LaunchTemplateName")))
    return template_version(template, spec.get("Version")) if template else None


def _asg_launch(region: Region, group: Mapping[str, Any]
                ) -> tuple[str | None, Capacity, dict[str, str], set[str]]:
    """(instance type, capacity, tags from the template, unknown paths) of a group."""
    policy = group.get("MixedInstancesPolicy")
    spec = group.get("LaunchTemplate")
    overrides: list[Mapping[str, Any]] = []
    if isinstance(policy, Mapping):
        launch = policy.get("LaunchTemplate") or {}
        spec = launch.get("LaunchTemplateSpecification") or {}
        overrides = [o for o in launch.get("Overrides") or [] if isinstance(o, Mapping)]
    data = _template_data(region, spec)
    if not (isinstance(spec, Mapping) and spec) and group.get("LaunchConfigurationName"):
        configuration = region.launch_configurations.get(str(group["LaunchConfigurationName"]))
        if configuration is not None:
            capacity = Capacity.SPOT if configuration.get("SpotPrice") else Capacity.ON_DEMAND
            return configuration.get("InstanceType"), capacity, {}, set()
    unknown: set[str] = set()
    typed = [str(o["InstanceType"]) for o in overrides if o.get("InstanceType")]
    instance_type = typed[0] if typed else (data or {}).get("InstanceType")
    if instance_type is None:
        unknown |= TYPE_UNKNOWN  # attribute-based selection, or a template not read
    if isinstance(policy, Mapping):
        capacity = _distribution_capacity(policy)
    elif data is not None:
        capacity = _market_capacity(data)
    else:
        capacity = Capacity.UNKNOWN
        unknown.add("capacity")
    return instance_type, capacity, _instance_tag_specifications(data or {}), unknown


def _standalone_groups(region: Region) -> Iterable[Mapping[str, Any]]:
    """Autoscaling groups, without those EKS manages for a node group."""
    return [g for g in region.items("autoscaling_groups")
            if g.get("AutoScalingGroupName") not in region.eks_managed_groups
            and "eks:nodegroup-name" not in tags(g.get("Tags"))]


def autoscaling_group_resource(region: Region, group: Mapping[str, Any]) -> Resource:
    instance_type, capacity, template_tags, unknown = _asg_launch(region, group)
    desired = int(group.get("DesiredCapacity") or 0)
    return region.resource(
        kind="aws_autoscaling_group", category=Category.AUTOSCALING_GROUP,
        id=str(group.get("AutoScalingGroupARN") or group["AutoScalingGroupName"]),
        name=str(group["AutoScalingGroupName"]), tags={**template_tags, **_asg_tags(group)},
        instance_type=instance_type, capacity=capacity, count=desired,
        members=region.group_instances.get(str(group["AutoScalingGroupName"]), ()),
        state=State.RUNNING if desired > 0 else State.STOPPED, unknown=frozenset(unknown),
        raw=dict(group),
    )


# ---------------------------------------------------------------------------- EKS


def _node_group_type(region: Region, group: Mapping[str, Any]) -> tuple[str | None, set[str]]:
    """(instance type, unknown paths): the first listed type, else its launch template's, else
    EKS's default when the group names no template."""
    types = group.get("instanceTypes") or []
    if types:
        return str(types[0]), set()
    spec = group.get("launchTemplate")
    if not isinstance(spec, Mapping):
        return _EKS_DEFAULT_INSTANCE_TYPE, set()
    template = region.templates.get(str(spec.get("id"))) \
        or region.templates.get(str(spec.get("name")))
    instance_type = template_version(template, spec.get("version")).get("InstanceType") \
        if template else None
    return instance_type, set() if instance_type is not None else set(TYPE_UNKNOWN)


_EKS_CAPACITY = {"SPOT": Capacity.SPOT, "CAPACITY_BLOCK": Capacity.RESERVED}


def node_group_resource(region: Region, group: Mapping[str, Any]) -> Resource:
    scaling = group.get("scalingConfig") or {}
    desired = int(scaling.get("desiredSize") or 0)
    instance_type, unknown = _node_group_type(region, group)
    capacity = _EKS_CAPACITY.get(str(group.get("capacityType") or "ON_DEMAND").upper(),
                                 Capacity.ON_DEMAND)
    return region.resource(
        kind="aws_eks_node_group", category=Category.NODE_GROUP,
        id=str(group.get("nodegroupArn") or group["nodegroupName"]),
        name=str(group["nodegroupName"]), cluster=group.get("clusterName"),
        tags={**tags(group.get("labels")), **tags(group.get("tags"))},
        billing_tags=tags(group.get("tags")),
        instance_type=instance_type, capacity=capacity, count=desired,
        members=region.node_group_instances(group),
        state=State.RUNNING if desired > 0 else State.STOPPED,
        unknown=frozenset(unknown), raw=dict(group),
    )


# ---------------------------------------------------------------------------- inventory entries

INSTANCES = section(
    "instances", "ec2", lambda c, _: _instances(c), ["ec2:DescribeInstances"],
    normalize=lambda region, i: [instance_resource(region, i)], select=_live_instances)
LAUNCH_TEMPLATES = section(
    "launch_templates", "ec2", lambda c, _: _launch_templates(c),
    ["ec2:DescribeLaunchTemplates", "ec2:DescribeLaunchTemplateVersions"],
    normalize=launch_template_resources)
AUTOSCALING_GROUPS = section(
    "autoscaling_groups", "autoscaling", lambda c, _: _autoscaling_groups(c),
    ["autoscaling:DescribeAutoScalingGroups"],
    normalize=lambda region, g: [autoscaling_group_resource(region, g)],
    select=_standalone_groups)
LAUNCH_CONFIGURATIONS = section(
    "launch_configurations", "autoscaling",
    lambda c, scan: _launch_configurations(c, scan["autoscaling_groups"]),
    ["autoscaling:DescribeLaunchConfigurations"], needs="autoscaling_groups")
NODE_GROUPS = section(
    "node_groups", "eks", lambda c, _: _node_groups(c),
    ["eks:ListClusters", "eks:ListNodegroups", "eks:DescribeNodegroup"],
    normalize=lambda region, g: [node_group_resource(region, g)])
