"""The AWS inventory: every section a region scan reads, in reading order. A new AWS resource
type is one `section(...)` entry in its concept's module (reader, normalizer, IAM actions), listed
here. Resources come out in this order too; a section another needs is read before it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import Catalog
from engine.core.model import Resource
from engine.sources.aws import compute, instance_types, ml, spot_prices, storage
from engine.sources.aws.region import Region
from engine.sources.aws.section import AwsSection

SECTIONS: tuple[AwsSection, ...] = (
    compute.INSTANCES,
    storage.VOLUMES,
    compute.LAUNCH_TEMPLATES,
    storage.EBS_ENCRYPTION_BY_DEFAULT,
    storage.KMS_AWS_MANAGED_ALIASES,
    compute.AUTOSCALING_GROUPS,
    compute.LAUNCH_CONFIGURATIONS,
    compute.NODE_GROUPS,
    instance_types.INSTANCE_TYPES,  # after every section that names a type it might not know
    spot_prices.SPOT_PRICES,
    ml.TRAINING_JOBS,
    ml.NOTEBOOK_INSTANCES,
    ml.ENDPOINTS,
)


def read_actions() -> frozenset[str]:
    """The IAM actions the readers of every section call."""
    return frozenset(action for entry in SECTIONS for action in entry.reads)


def region_resources(scan: Mapping[str, Any], catalog: Catalog) -> list[Resource]:
    """Every resource of one scanned (account, region). Pure."""
    region = Region(scan, instance_types.learned_catalog(catalog, scan))
    return [resource for entry in SECTIONS if entry.normalize is not None
            for native in entry.natives(region) for resource in entry.normalize(region, native)]
