"""SageMaker normalizers: notebook instances, training jobs, pipelines' training steps and
endpoint variants. SageMaker always encrypts its ML volumes; `customer_key` follows its KMS key
argument. `ml.` types are priced as the EC2 type they run on (`registry.enriched`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.core.errors import InputError
from engine.core.model import Capacity, Category, Resource
from engine.inputfiles import tidy_document
from engine.sources.terraform.attributes import Attrs, tag_text
from engine.sources.terraform.aws import aws_region, aws_tags
from engine.sources.terraform.build import new_resource
from engine.sources.terraform.plan_index import PlannedChange
from engine.sources.terraform.readers import (
    TYPE_UNKNOWN,
    flag_or_default,
    mark_key,
    read_count,
    read_instance_type,
    spot_capacity,
)
from engine.sources.terraform.registry import normalizer


@normalizer("aws_sagemaker_notebook_instance")
def _aws_sagemaker_notebook(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    return [
        new_resource(
            change,
            Category.NOTEBOOK,
            "aws",
            unknown,
            instance_type=read_instance_type(attrs, unknown, "instance_type"),
            capacity=Capacity.ON_DEMAND,  # notebook instances have no spot option
            encrypted=True,
            customer_key=mark_key(attrs.is_set("kms_key_id"), unknown),
            tags=aws_tags(change, unknown),
            region=aws_region(change),
        )
    ]


@normalizer("aws_sagemaker_training_job")
def _aws_sagemaker_training_job(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    config = attrs.first("resource_config") or attrs.child("resource_config", 0)
    spot = flag_or_default(attrs, "enable_managed_spot_training", False)
    return [
        new_resource(
            change,
            Category.TRAINING_JOB,
            "aws",
            unknown,
            instance_type=read_instance_type(config, unknown, "instance_type"),
            count=read_count(config, unknown, ("instance_count",)),
            capacity=spot_capacity(spot, unknown),
            encrypted=True,
            customer_key=mark_key(config.is_set("volume_kms_key_id"), unknown),
            checkpoint_uri=_checkpoint_uri(attrs, unknown),
            tags=aws_tags(change, unknown),
            region=aws_region(change),
        )
    ]


def _checkpoint_uri(attrs: Attrs, unknown: set[str]) -> str | None:
    """`checkpoint_config.s3_uri`; unknown while the block or the URI is computed."""
    if attrs.hidden("checkpoint_config"):
        unknown.add("checkpoint_uri")
        return None
    block = attrs.first("checkpoint_config")
    if block is None:
        return None
    if block.hidden("s3_uri"):
        unknown.add("checkpoint_uri")
        return None
    return block.text("s3_uri")


@normalizer("aws_sagemaker_pipeline")
def _aws_sagemaker_pipeline(change: PlannedChange) -> list[Resource]:
    """One TRAINING_JOB per `Training` step of an inline `pipeline_definition` (JSON).

    Step arguments are the CreateTrainingJob request; a `{"Get": "Parameters.X"}` value reads
    the pipeline parameter's `DefaultValue` (what runs unless a start overrides it); any other
    expression is unknown. A definition kept in S3 (`pipeline_definition_s3_location`) or
    computed is not known: such a pipeline gives no resources.
    """
    attrs = change.attrs
    definition = _pipeline_definition(attrs.get("pipeline_definition"))
    if definition is None:
        return []
    defaults = _pipeline_defaults(definition)
    shared: set[str] = set()
    tags = aws_tags(change, shared)
    found: list[Resource] = []
    steps = definition.get("Steps")
    for position, step in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(step, dict) or step.get("Type") != "Training":
            continue
        arguments = step.get("Arguments")
        if isinstance(arguments, dict):
            found.append(_pipeline_training_step(change, position, step, arguments, defaults,
                                                 tags, shared))
    return found


def _pipeline_definition(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        definition = tidy_document(json.loads(value), "pipeline_definition", len(value))
    except (ValueError, RecursionError, InputError):
        return None  # unreadable, too long a number, or too deep: as if there were none
    return definition if isinstance(definition, dict) else None


def _pipeline_defaults(definition: dict[str, Any]) -> dict[str, Any]:
    parameters = definition.get("Parameters")
    return {
        str(p["Name"]): p.get("DefaultValue")
        for p in (parameters if isinstance(parameters, list) else [])
        if isinstance(p, dict) and isinstance(p.get("Name"), str) and "DefaultValue" in p
    }


_UNRESOLVED = object()


def _step_value(value: Any, defaults: Mapping[str, Any]) -> Any:
    """A literal argument value, a parameter's default, or `_UNRESOLVED` for an expression."""
    if isinstance(value, dict):
        reference = value.get("Get")
        if len(value) == 1 and isinstance(reference, str) and reference.startswith("Parameters."):
            name = reference.removeprefix("Parameters.")
            return defaults.get(name, _UNRESOLVED) if name in defaults else _UNRESOLVED
        return _UNRESOLVED
    return value


def _pipeline_training_step(
    change: PlannedChange,
    position: int,
    step: dict[str, Any],
    arguments: dict[str, Any],
    defaults: Mapping[str, Any],
    tags: dict[str, str],
    shared: set[str],
) -> Resource:
    unknown = set(shared)
    found_config = arguments.get("ResourceConfig")
    config: dict[str, Any] = found_config if isinstance(found_config, dict) else {}
    instance_type = _step_value(config.get("InstanceType"), defaults)
    if instance_type is _UNRESOLVED or (instance_type is not None
                                        and not isinstance(instance_type, str)):
        unknown.update(TYPE_UNKNOWN)
        instance_type = None
    count = _step_value(config.get("InstanceCount", 1), defaults)
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        unknown.add("count")
        count = 1
    spot = _step_value(arguments.get("EnableManagedSpotTraining", False), defaults)
    capacity = spot_capacity(spot if isinstance(spot, bool) else None, unknown)
    checkpoint = arguments.get("CheckpointConfig")
    uri = _step_value(checkpoint.get("S3Uri"), defaults) if isinstance(checkpoint, dict) else None
    if uri is _UNRESOLVED:
        unknown.add("checkpoint_uri")
    step_tags = arguments.get("Tags")
    own_tags = {str(t["Key"]): tag_text(t.get("Value", "")) for t in
                (step_tags if isinstance(step_tags, list) else [])
                if isinstance(t, dict) and "Key" in t}
    name = step.get("Name") if isinstance(step.get("Name"), str) else str(position)
    return new_resource(
        change,
        Category.TRAINING_JOB,
        "aws",
        unknown,
        kind=f"{change.type}.training_step",
        id=f"{change.address}.steps[{json.dumps(name)}]",
        instance_type=instance_type,
        count=count,
        capacity=capacity,
        encrypted=True,
        customer_key=bool(config.get("VolumeKmsKeyId")),
        checkpoint_uri=uri if isinstance(uri, str) and uri else None,
        tags={**tags, **own_tags},
        region=aws_region(change),
        raw={"pipeline": change.address, "step": step},
    )


@normalizer("aws_sagemaker_endpoint_configuration")
def _aws_sagemaker_endpoint_configuration(change: PlannedChange) -> list[Resource]:
    """One ENDPOINT per instance-backed (not serverless) production or shadow variant."""
    attrs, shared = change.attrs, set[str]()
    tags = aws_tags(change, shared)
    customer_key = mark_key(attrs.is_set("kms_key_arn"), shared)
    resources: list[Resource] = []
    for block in ("production_variants", "shadow_production_variants"):
        for position, variant in enumerate(attrs.blocks(block)):
            if not variant.text("instance_type") and not variant.hidden("instance_type"):
                continue  # serverless
            unknown = set(shared)
            resources.append(
                new_resource(
                    change,
                    Category.ENDPOINT,
                    "aws",
                    unknown,
                    kind=f"{change.type}.{block}",
                    id=f"{change.address}.{block}[{position}]",
                    instance_type=read_instance_type(variant, unknown, "instance_type"),
                    count=read_count(variant, unknown, ("initial_instance_count",)),
                    capacity=Capacity.ON_DEMAND,  # endpoints have no spot option
                    encrypted=True,
                    customer_key=customer_key,
                    tags=tags,
                    region=aws_region(change),
                    raw={**change.raw, block: [variant.value]},
                )
            )
    return resources
