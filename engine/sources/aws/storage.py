"""Storage: EBS volumes, the region's EBS encryption-by-default setting, and the AWS managed KMS
keys that tell a customer key from an AWS one.

EBS volumes are separate VOLUME resources carrying the tags of the instance they are attached to
under their own (an exemption or `env` tag on an instance covers its disks). A volume's
`KmsKeyId` is a customer key unless it is an AWS managed key (an `alias/aws/...` alias, from
`kms:ListAliases` in the region); when the aliases could not be read, `customer_key` is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.model import Category, Resource, State
from engine.sources.aws.reading import pages, plain
from engine.sources.aws.region import Region, name, tags
from engine.sources.aws.section import section

_VOLUME_STATES = {"in-use": State.RUNNING, "available": State.STOPPED}


def customer_key(kms_key_id: Any, aws_managed: frozenset[str] | None) -> bool | None:
    """Whether an EBS KMS key is customer managed; None when that cannot be told."""
    if not kms_key_id:
        return False
    key = str(kms_key_id)
    if key.startswith("alias/aws/") or ":alias/aws/" in key:
        return False
    if aws_managed is None:
        return None
    return key.rsplit("/", 1)[-1] not in aws_managed


# ---------------------------------------------------------------------------- reading


def _volumes(ec2: Any) -> list[dict[str, Any]]:
    return [plain(v) for v in pages(ec2, "describe_volumes", "Volumes")]


def _ebs_encryption_by_default(ec2: Any) -> bool:
    return bool(ec2.get_ebs_encryption_by_default().get("EbsEncryptionByDefault"))


def _aws_managed_key_aliases(kms: Any) -> list[dict[str, Any]]:
    aliases = pages(kms, "list_aliases", "Aliases")
    return [{"AliasName": a["AliasName"], "TargetKeyId": a.get("TargetKeyId")}
            for a in aliases if str(a.get("AliasName", "")).startswith("alias/aws/")]


# ---------------------------------------------------------------------------- normalizing


def volume_resource(region: Region, volume: Mapping[str, Any]) -> Resource:
    own = tags(volume.get("Tags"))
    attached = [str(a.get("InstanceId")) for a in volume.get("Attachments") or []
                if isinstance(a, Mapping) and a.get("InstanceId")]
    parent_tags: dict[str, str] = {}
    for instance_id in attached:
        parent_tags.update(tags((region.instances.get(instance_id) or {}).get("Tags")))
    parent_tags.pop("Name", None)
    encrypted = bool(volume.get("Encrypted"))
    key = customer_key(volume.get("KmsKeyId"), region.aws_managed_keys) if encrypted else False
    volume_id = str(volume["VolumeId"])
    return region.resource(
        kind="aws_ebs_volume", category=Category.VOLUME, id=volume_id, name=name(own, volume_id),
        tags={**parent_tags, **own}, encrypted=encrypted, customer_key=key,
        unknown=frozenset() if key is not None else frozenset({"customer_key"}),
        state=_VOLUME_STATES.get(str(volume.get("State")), State.UNKNOWN),
        owner=attached[0] if attached else None, raw=dict(volume),
    )


# ---------------------------------------------------------------------------- inventory entries

VOLUMES = section("volumes", "ec2", lambda c, _: _volumes(c), ["ec2:DescribeVolumes"],
                  normalize=lambda region, v: [volume_resource(region, v)])
EBS_ENCRYPTION_BY_DEFAULT = section(
    "ebs_encryption_by_default", "ec2", lambda c, _: _ebs_encryption_by_default(c),
    ["ec2:GetEbsEncryptionByDefault"])
KMS_AWS_MANAGED_ALIASES = section(
    "kms_aws_managed_aliases", "kms", lambda c, _: _aws_managed_key_aliases(c),
    ["kms:ListAliases"])
