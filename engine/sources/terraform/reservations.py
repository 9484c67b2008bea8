"""Prepaid and reserved capacity in a plan, per cloud: what `gpu-spot-required` lets pass.

- AWS: a `capacity_reservation_specification` with a `capacity_reservation_target` (an
  On-Demand Capacity Reservation or a reservation group); `instance_market_options.market_type =
  "capacity-block"` (EC2 Capacity Blocks for ML). `capacity_reservation_preference = "open"`
  alone is not a reservation: the instance only may use a matching open one.
- GCP: `reservation_affinity` of type SPECIFIC_RESERVATION (ANY_RESERVATION is opportunistic);
  DWS flex-start (`scheduling.provisioning_model = "FLEX_START"`, GKE `node_config.flex_start`,
  node pool `queued_provisioning.enabled`).
- Azure: a `capacity_reservation_group_id`.

Each reader answers True, False, or None when the plan does not tell yet. A block the
configuration does not set is the provider's default: no reservation (also when the plan
carries no configuration to tell).
"""

from __future__ import annotations

from engine.core.model import Capacity
from engine.sources.terraform.attributes import Attrs
from engine.sources.terraform.readers import spot_capacity


def _block(attrs: Attrs, name: str) -> Attrs | bool | None:
    """The first `name` block; False when absent or left to the provider; None when the
    configuration sets it but its value is not known yet."""
    if attrs.hidden(name):
        return None if attrs.configured(name) is True else False
    return attrs.first(name) or False


def _text_is(attrs: Attrs, key: str, wanted: str) -> bool | None:
    if attrs.hidden(key):
        return None if attrs.configured(key) is True else False
    return (attrs.text(key) or "").upper() == wanted


def any_true(*answers: bool | None) -> bool | None:
    if any(answers):
        return True
    return None if None in answers else False


def aws_reserved(attrs: Attrs) -> bool | None:
    """An instance or launch template launching into a capacity reservation or block."""
    return any_true(aws_reservation_target(attrs), aws_capacity_block(attrs))


def aws_reservation_target(attrs: Attrs) -> bool | None:
    """A capacity_reservation_target (a reservation or a reservation group)."""
    spec = _block(attrs, "capacity_reservation_specification")
    if not isinstance(spec, Attrs):
        return spec
    target = _block(spec, "capacity_reservation_target")
    return target if not isinstance(target, Attrs) else True


def aws_capacity_block(attrs: Attrs) -> bool | None:
    """A Capacity Block for ML (`market_type = "capacity-block"`)."""
    options = _block(attrs, "instance_market_options")
    if not isinstance(options, Attrs):
        return options
    return _text_is(options, "market_type", "CAPACITY-BLOCK")


def aws_node_group_reserved(attrs: Attrs) -> bool | None:
    return _text_is(attrs, "capacity_type", "CAPACITY_BLOCK")


def gcp_reserved(attrs: Attrs) -> bool | None:
    """A GCE instance or template on a specific reservation or DWS flex-start."""
    affinity = _block(attrs, "reservation_affinity")
    specific = _text_is(affinity, "type", "SPECIFIC_RESERVATION") \
        if isinstance(affinity, Attrs) else affinity
    scheduling = _block(attrs, "scheduling")
    flex = _text_is(scheduling, "provisioning_model", "FLEX_START") \
        if isinstance(scheduling, Attrs) else scheduling
    return any_true(specific, flex)


def gke_reserved(pool: Attrs, node: Attrs) -> bool | None:
    """A GKE node pool on a specific reservation, flex-start or queued provisioning (DWS)."""
    affinity = _block(node, "reservation_affinity")
    specific = _text_is(affinity, "consume_reservation_type", "SPECIFIC_RESERVATION") \
        if isinstance(affinity, Attrs) else affinity
    queued = _block(pool, "queued_provisioning")
    return any_true(specific, _flag_set(node, "flex_start"),
                    _flag_set(queued, "enabled") if isinstance(queued, Attrs) else queued)


def _flag_set(attrs: Attrs, key: str) -> bool | None:
    if attrs.hidden(key):
        return None if attrs.configured(key) is True else False
    return attrs.flag(key) is True


def azure_reserved(attrs: Attrs) -> bool | None:
    """A VM, scale set or AKS node pool in a capacity reservation group."""
    key = "capacity_reservation_group_id"
    if attrs.hidden(key):
        return None if attrs.configured(key) is True else False
    return attrs.text(key) is not None


def reserved_or_spot(reserved: bool | None, spot: bool | None, unknown: set[str]) -> Capacity:
    """RESERVED when the capacity is prepaid/reserved, else spot or on-demand as `spot` says."""
    if reserved:
        return Capacity.RESERVED
    if spot:
        return Capacity.SPOT
    return spot_capacity(None if reserved is None else spot, unknown)
