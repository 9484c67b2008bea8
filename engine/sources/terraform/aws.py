"""AWS normalizers: EC2 instances and spot requests, launch templates and configurations,
autoscaling groups, EKS node groups, EBS volumes, S3 buckets.

Tags: `tags_all` (which holds provider `default_tags`) before `tags`; when `tags_all` is unknown,
the provider block's constant `default_tags` are merged under `tags`. EBS `encrypted` unset is
unknown (account default encryption may apply); every aws_instance has a root VOLUME even when
the plan shows no root_block_device. S3 encrypts every new bucket with SSE-S3 since January 2023;
`customer_key` is True only for `aws:kms` with a key id, from the bucket's inline block or an
`aws_s3_bucket_server_side_encryption_configuration` in the same plan.
"""

from __future__ import annotations

import re

from engine.core.model import Capacity, Category, Resource
from engine.sources.terraform.addresses import index_suffix, without_index
from engine.sources.terraform.attributes import KNOWN_AFTER_APPLY, AttrPath, Attrs, tag_text
from engine.sources.terraform.build import new_resource, new_volume
from engine.sources.terraform.plan_index import PlanIndex, PlannedChange
from engine.sources.terraform.readers import (
    ENCRYPTION_UNKNOWN,
    TYPE_UNKNOWN,
    mark_key,
    merge_defaults,
    provider_region,
    read_count,
    read_instance_type,
    spot_capacity,
)
from engine.sources.terraform.registry import normalizer
from engine.sources.terraform.reservations import (
    any_true,
    aws_capacity_block,
    aws_node_group_reserved,
    aws_reservation_target,
    aws_reserved,
    reserved_or_spot,
)


def aws_tags(change: PlannedChange, unknown: set[str]) -> dict[str, str]:
    """`tags_all` when known, else `tags` plus the provider's constant `default_tags`."""
    attrs = change.attrs
    if attrs.has("tags_all") and not attrs.hidden("tags_all"):
        return attrs.mapping("tags_all", unknown)
    own = attrs.mapping("tags", unknown)
    if not attrs.has("tags_all"):
        return own  # a provider version before default_tags
    defaults = change.plan.provider_setting(change, "aws", "default_tags", 0, "tags")
    return merge_defaults(defaults, own, unknown)


def aws_region(change: PlannedChange) -> str | None:
    region = change.attrs.text("region")
    if region:
        return region
    zone = change.attrs.text("availability_zone") or ""
    found = re.match(r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d+", zone)
    return found.group(0) if found else provider_region(change, "aws")


def _market_is_spot(attrs: Attrs) -> bool | None:
    """From `instance_market_options`: True spot, False not, None not known yet."""
    if attrs.hidden("instance_market_options"):
        return False if attrs.left_to_provider("instance_market_options") else None
    options = attrs.first("instance_market_options")
    if options is None:
        return False
    if options.hidden("market_type"):
        return None
    return (options.text("market_type") or "").lower() == "spot"


def _referenced(change: PlannedChange, target_type: str, *path: str | int) -> PlannedChange | None:
    """The change of `target_type` the expression at `path` refers to, in the same module."""
    for reference in change.attrs.references(*path):
        parts = reference.split(".")
        if len(parts) >= 2 and parts[0] == target_type:
            address = f"{change.module_prefix}{target_type}.{parts[1].split('[', 1)[0]}"
            found = change.plan.find(address, index_hint=index_suffix(change.address))
            if found is not None:
                return found
    return None


def _launch_template(change: PlannedChange, *path: str | int) -> PlannedChange | None:
    """The aws_launch_template that the block at `path` names, when it is in the plan."""
    spec = change.attrs.child(*path)
    if not isinstance(spec.value, dict) and not spec.is_unknown():
        return None
    for key in ("id", "launch_template_id", "name", "launch_template_name"):
        found = _referenced(change, "aws_launch_template", *path, key)
        if found is not None:
            return found
    for key in ("name", "launch_template_name", "id", "launch_template_id"):
        value = spec.text(key)
        attribute = "name" if "name" in key else "id"
        if value:
            found = change.plan.find_by_attribute("aws_launch_template", attribute, value)
            if found is not None:
                return found
    return None


def _ebs_encryption(block: Attrs) -> tuple[bool | None, bool | None, set[str]]:
    """(encrypted, customer_key, unknown paths) of an EBS volume or block device."""
    encrypted = block.flag("encrypted")  # launch templates hold "true"/"false" strings
    if encrypted is None:
        return None, None, set(ENCRYPTION_UNKNOWN)  # unset: account default encryption may apply
    if not encrypted:
        return False, False, set()
    unknown: set[str] = set()
    return True, mark_key(block.is_set("kms_key_id"), unknown), unknown


def _ebs_volume(change: PlannedChange, parent: Resource, block_path: str, block: Attrs) -> Resource:
    encrypted, customer_key, unknown = _ebs_encryption(block)
    own_tags = block.mapping("tags_all", set()) or block.mapping("tags", set())
    extra_tags = {**change.attrs.mapping("volume_tags", set()), **own_tags}
    return new_volume(
        change,
        parent,
        block_path,
        block,
        encrypted=encrypted,
        customer_key=customer_key,
        unknown=unknown,
        extra_tags=extra_tags,
    )


def _block_device_volumes(change: PlannedChange, parent: Resource, *, root: bool) -> list[Resource]:
    """VOLUMEs for `root_block_device` / `ebs_block_device`; `root` adds the implicit root disk."""
    attrs = change.attrs
    volumes: list[Resource] = []
    roots = attrs.blocks("root_block_device")
    if root and not roots:
        volumes.append(
            new_volume(
                change,
                parent,
                "root_block_device[0]",
                attrs.child("root_block_device", 0),
                encrypted=None,
                customer_key=None,
                unknown=ENCRYPTION_UNKNOWN,
            )
        )
    for name in ("root_block_device", "ebs_block_device"):
        for position, block in enumerate(attrs.blocks(name)):
            volumes.append(_ebs_volume(change, parent, f"{name}[{position}]", block))
    return volumes


def _market_capacity(attrs: Attrs, unknown: set[str]) -> Capacity:
    """Reserved (capacity reservation or block), spot or on-demand, from the market options."""
    return reserved_or_spot(aws_reserved(attrs), _market_is_spot(attrs), unknown)


def _instance_capacity(attrs: Attrs, template: PlannedChange | None, unknown: set[str]) -> Capacity:
    """From the instance's own market and reservation settings; from its launch template's for
    each that the instance leaves unset."""
    def source(key: str) -> Attrs:
        inherit = template is not None and attrs.configured(key) is False
        return template.attrs if inherit and template is not None else attrs

    market, reservation = source("instance_market_options"), source(
        "capacity_reservation_specification")
    reserved = any_true(aws_reservation_target(reservation), aws_capacity_block(market))
    return reserved_or_spot(reserved, _market_is_spot(market), unknown)


@normalizer("aws_instance", "aws_spot_instance_request")
def _aws_instance(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    template = _launch_template(change, "launch_template", 0)
    instance_type = read_instance_type(attrs, unknown, "instance_type")
    if template is not None and attrs.left_to_provider("instance_type"):
        unknown.difference_update(TYPE_UNKNOWN)
        instance_type = read_instance_type(template.attrs, unknown, "instance_type")
    if change.type == "aws_spot_instance_request":
        capacity = Capacity.SPOT
    else:
        capacity = _instance_capacity(attrs, template, unknown)
    instance = new_resource(
        change,
        Category.INSTANCE,
        "aws",
        unknown,
        instance_type=instance_type,
        capacity=capacity,
        tags=aws_tags(change, unknown),
        region=aws_region(change),
    )
    return [instance, *_block_device_volumes(change, instance, root=True)]


def _instance_tag_specifications(attrs: Attrs, unknown: set[str]) -> dict[str, str]:
    """Tags a launch template gives the instances it launches."""
    tags: dict[str, str] = {}
    for spec in attrs.blocks("tag_specifications"):
        if spec.text("resource_type") in (None, "instance"):
            tags.update(spec.mapping("tags", unknown))
    return tags


@normalizer("aws_launch_template")
def _aws_launch_template(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    tags = {**aws_tags(change, unknown), **_instance_tag_specifications(attrs, unknown)}
    template = new_resource(
        change,
        Category.LAUNCH_TEMPLATE,
        "aws",
        unknown,
        instance_type=read_instance_type(attrs, unknown, "instance_type"),
        capacity=_market_capacity(attrs, unknown),
        tags=tags,
        region=aws_region(change),
    )
    volumes = []
    for position, mapping in enumerate(attrs.blocks("block_device_mappings")):
        ebs = mapping.first("ebs")
        if ebs is not None:
            path = f"block_device_mappings[{position}]"
            volumes.append(_ebs_volume(change, template, path, ebs))
    return [template, *volumes]


def _spot_price_is_spot(attrs: Attrs) -> bool | None:
    if attrs.hidden("spot_price"):
        return False if attrs.left_to_provider("spot_price") else None
    return attrs.text("spot_price") is not None


@normalizer("aws_launch_configuration")
def _aws_launch_configuration(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    configuration = new_resource(
        change,
        Category.LAUNCH_TEMPLATE,
        "aws",
        unknown,
        instance_type=read_instance_type(attrs, unknown, "instance_type"),
        capacity=spot_capacity(_spot_price_is_spot(attrs), unknown),
        region=aws_region(change),
    )
    return [configuration, *_block_device_volumes(change, configuration, root=False)]


def _asg_tags(attrs: Attrs, unknown: set[str]) -> dict[str, str]:
    """Propagated tags from both shapes: `tag` blocks and the older `tags` list of maps
    (`propagate_at_launch` a bool or a "true"/"false" string); `gpuwarden*` control tags always."""
    tags: dict[str, str] = {}
    for shape in ("tag", "tags"):
        if attrs.hidden(shape) and not attrs.left_to_provider(shape):
            unknown.add("tags")
        for entry in attrs.blocks(shape):
            key = entry.text("key")
            if key is None:
                continue
            control_tag = key.lower().startswith("gpuwarden")
            if entry.flag("propagate_at_launch") is False and not control_tag:
                continue
            if entry.hidden("value"):
                unknown.add(f"tags.{key}")
                tags[key] = KNOWN_AFTER_APPLY
            else:
                tags[key] = tag_text(entry.get("value") or "")
    return tags


def _asg_distribution_is_spot(policy: Attrs) -> bool | None:
    """All spot when no on-demand base and 0% on-demand above it (AWS defaults: 0 and 100)."""
    if policy.hidden("instances_distribution"):
        return False if policy.left_to_provider("instances_distribution") else None
    distribution = policy.first("instances_distribution")
    if distribution is None:
        return False
    values = []
    for key, default in (
        ("on_demand_base_capacity", 0),
        ("on_demand_percentage_above_base_capacity", 100),
    ):
        if distribution.hidden(key) and not distribution.left_to_provider(key):
            return None
        found = distribution.number(key)
        values.append(default if found is None else found)
    return values == [0, 0]


def _asg_launch_source(change: PlannedChange) -> PlannedChange | None:
    """The launch template or configuration in the plan that the group launches from."""
    policy = ("mixed_instances_policy", 0, "launch_template", 0, "launch_template_specification", 0)
    for path in (policy, ("launch_template", 0)):
        template = _launch_template(change, *path)
        if template is not None:
            return template
    found = _referenced(change, "aws_launch_configuration", "launch_configuration")
    name = change.attrs.text("launch_configuration")
    if found is None and name:
        found = change.plan.find_by_attribute("aws_launch_configuration", "name", name)
    return found


def _asg_type_and_capacity(
    change: PlannedChange, source: PlannedChange | None, unknown: set[str]
) -> tuple[str | None, Capacity]:
    attrs, policy_key = change.attrs, "mixed_instances_policy"
    if attrs.hidden(policy_key) and not attrs.left_to_provider(policy_key):
        unknown.update(TYPE_UNKNOWN | {"capacity"})
        return None, Capacity.UNKNOWN
    policy = attrs.first("mixed_instances_policy")
    if policy is not None:
        template = policy.first("launch_template")
        overrides = template.blocks("override") if template else []
        typed = [o for o in overrides if o.text("instance_type") or o.hidden("instance_type")]
        if typed:
            instance_type = read_instance_type(typed[0], unknown, "instance_type")
        elif source is not None:
            instance_type = read_instance_type(source.attrs, unknown, "instance_type")
        else:
            instance_type = None
            unknown.update(TYPE_UNKNOWN)
        return instance_type, spot_capacity(_asg_distribution_is_spot(policy), unknown)
    if source is None:
        unknown.update(TYPE_UNKNOWN | {"capacity"})
        return None, Capacity.UNKNOWN
    instance_type = read_instance_type(source.attrs, unknown, "instance_type")
    if source.type == "aws_launch_configuration":
        return instance_type, spot_capacity(_spot_price_is_spot(source.attrs), unknown)
    return instance_type, _market_capacity(source.attrs, unknown)


def _block_count(
    attrs: Attrs, unknown: set[str], capacity_block: bool, desired: AttrPath, minimum: AttrPath,
    maximum: AttrPath,
) -> int:
    """Instances of a group: desired, else minimum. A Capacity Block's group counts the block's
    instances, its maximum: EKS creates it at desired size 0 and it scales up when the block
    starts, and the block is paid for whole either way."""
    count = read_count(attrs, unknown, desired, minimum)
    top = attrs.number(*maximum) if capacity_block else None
    return max(count, top) if top is not None else count


def _count_basis(attrs: Attrs, desired: AttrPath, minimum: AttrPath) -> str | None:
    """Why a group's count is its minimum: no desired size is set (AWS starts it at min)."""
    configured_later = attrs.hidden(*desired) and not attrs.left_to_provider(*desired)
    if attrs.number(*desired) is None and attrs.number(*minimum) is not None \
            and not configured_later:
        return "min size: no desired size is set"
    return None


@normalizer("aws_autoscaling_group")
def _aws_autoscaling_group(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    source = _asg_launch_source(change)
    instance_type, capacity = _asg_type_and_capacity(change, source, unknown)
    if capacity != Capacity.SPOT and aws_reservation_target(attrs):
        capacity = Capacity.RESERVED  # the group's own capacity_reservation_specification
        unknown.discard("capacity")
    tags = _asg_tags(attrs, unknown)
    if source is not None and source.type == "aws_launch_template":
        tags = {**_instance_tag_specifications(source.attrs, set()), **tags}
    return [
        new_resource(
            change,
            Category.AUTOSCALING_GROUP,
            "aws",
            unknown,
            instance_type=instance_type,
            capacity=capacity,
            tags=tags,
            count=_block_count(
                attrs,
                unknown,
                source is not None and aws_capacity_block(source.attrs) is True,
                ("desired_capacity",),
                ("min_size",),
                ("max_size",),
            ),
            count_basis=_count_basis(attrs, ("desired_capacity",), ("min_size",)),
            region=aws_region(change),
        )
    ]


_EKS_DEFAULT_INSTANCE_TYPE = "t3.medium"  # what EKS launches when neither types nor template say


def _eks_instance_type(change: PlannedChange, unknown: set[str]) -> str | None:
    attrs = change.attrs
    if attrs.hidden("instance_types") and not attrs.left_to_provider("instance_types"):
        unknown.update(TYPE_UNKNOWN)
        return None
    if attrs.get("instance_types"):
        return read_instance_type(attrs, unknown, "instance_types", 0)
    template = _launch_template(change, "launch_template", 0)
    if template is not None:
        return read_instance_type(template.attrs, unknown, "instance_type")
    if attrs.first("launch_template") is not None or attrs.is_unknown("launch_template"):
        unknown.update(TYPE_UNKNOWN)  # a template outside the plan decides
        return None
    return _EKS_DEFAULT_INSTANCE_TYPE


def _node_group_reserved(change: PlannedChange) -> bool | None:
    """CAPACITY_BLOCK, or a launch template that targets a capacity reservation or block."""
    template = _launch_template(change, "launch_template", 0)
    from_template = aws_reserved(template.attrs) if template is not None else False
    return any_true(aws_node_group_reserved(change.attrs), from_template)


@normalizer("aws_eks_node_group")
def _aws_eks_node_group(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    if attrs.hidden("capacity_type"):
        spot = False if attrs.left_to_provider("capacity_type") else None
    else:
        spot = (attrs.text("capacity_type") or "ON_DEMAND").upper() == "SPOT"
    labels = attrs.mapping("labels", unknown)
    return [
        new_resource(
            change,
            Category.NODE_GROUP,
            "aws",
            unknown,
            instance_type=_eks_instance_type(change, unknown),
            capacity=reserved_or_spot(_node_group_reserved(change), spot, unknown),
            tags={**labels, **aws_tags(change, unknown)},
            billing_tags=aws_tags(change, unknown),
            count=_block_count(
                attrs,
                unknown,
                aws_node_group_reserved(attrs) is True,
                ("scaling_config", 0, "desired_size"),
                ("scaling_config", 0, "min_size"),
                ("scaling_config", 0, "max_size"),
            ),
            count_basis=_count_basis(attrs, ("scaling_config", 0, "desired_size"),
                                     ("scaling_config", 0, "min_size")),
            cluster=attrs.text("cluster_name"),
            region=aws_region(change),
        )
    ]


@normalizer("aws_ebs_volume")
def _aws_ebs_volume(change: PlannedChange) -> list[Resource]:
    encrypted, customer_key, unknown = _ebs_encryption(change.attrs)
    return [
        new_resource(
            change,
            Category.VOLUME,
            "aws",
            unknown,
            encrypted=encrypted,
            customer_key=customer_key,
            tags=aws_tags(change, unknown),
            region=aws_region(change),
        )
    ]


def _sse_customer_key(configuration: Attrs | None) -> bool | None:
    """Customer managed key of a server_side_encryption_configuration (its first rule)."""
    rule = configuration.first("rule") if configuration else None
    default = rule.first("apply_server_side_encryption_by_default") if rule else None
    if default is None:
        return False
    if default.hidden("sse_algorithm"):
        return None
    if not (default.text("sse_algorithm") or "").lower().startswith("aws:kms"):
        return False
    return default.is_set("kms_master_key_id")


def _bucket_encryption_index(plan: PlanIndex) -> dict[str, PlannedChange]:
    """Planned aws_s3_bucket_server_side_encryption_configuration by the bucket it applies to:
    keyed by the bucket's address (without index) when `bucket` refers to one, and by name."""
    index: dict[str, PlannedChange] = {}
    for candidate in plan.of_type("aws_s3_bucket_server_side_encryption_configuration"):
        for reference in candidate.attrs.references("bucket"):
            parts = reference.split(".")
            if len(parts) >= 2 and parts[0] == "aws_s3_bucket":
                bucket = parts[1].split("[", 1)[0]
                index.setdefault(f"{candidate.module_prefix}aws_s3_bucket.{bucket}", candidate)
        name = candidate.attrs.text("bucket")
        if name:
            index.setdefault(f"name:{name}", candidate)
    return index


def _bucket_encryption(change: PlannedChange) -> PlannedChange | None:
    index = change.plan.memo("s3-encryption", lambda: _bucket_encryption_index(change.plan))
    found = index.get(without_index(change.address))
    name = change.attrs.text("bucket")
    return found if found is not None or not name else index.get(f"name:{name}")


@normalizer("aws_s3_bucket")
def _aws_s3_bucket(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    separate = _bucket_encryption(change)
    inline = "server_side_encryption_configuration"
    if separate is not None:
        customer_key = _sse_customer_key(separate.attrs)
    elif attrs.hidden(inline) and not attrs.left_to_provider(inline):
        customer_key = None
    else:
        customer_key = _sse_customer_key(attrs.first(inline))
    return [
        new_resource(
            change,
            Category.BUCKET,
            "aws",
            unknown,
            encrypted=True,  # S3 encrypts every new object with SSE-S3 at least (since 2023-01)
            customer_key=mark_key(customer_key, unknown),
            tags=aws_tags(change, unknown),
            region=aws_region(change),
        )
    ]
