"""SageMaker: training jobs (in progress), notebook instances, endpoints (one resource per
instance-backed production variant, keyed `<endpoint ARN>/<variant>`).

`ml.` types keep their name and are priced as the EC2 type they run on. Spot:
`EnableManagedSpotTraining`; notebooks and endpoints have no spot option.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.model import Capacity, Category, Resource, State
from engine.sources.aws.reading import pages, plain
from engine.sources.aws.region import TYPE_UNKNOWN, Region, tags
from engine.sources.aws.section import section

_NOTEBOOK_STATES = {"Pending": State.RUNNING, "InService": State.RUNNING,
                    "Updating": State.RUNNING, "Stopping": State.STOPPED,
                    "Stopped": State.STOPPED, "Failed": State.STOPPED}
_ENDPOINT_STOPPED = frozenset({"OutOfService"})
_ENDPOINT_GONE = frozenset({"Failed", "Deleting"})


# ---------------------------------------------------------------------------- reading


def _tags_of(sagemaker: Any, arn: str) -> list[dict[str, Any]]:
    return [plain(t) for t in pages(sagemaker, "list_tags", "Tags", ResourceArn=arn)]


def _training_jobs(sagemaker: Any) -> list[dict[str, Any]]:
    """Jobs in progress: finished ones no longer spend."""
    jobs = []
    for summary in pages(sagemaker, "list_training_jobs", "TrainingJobSummaries",
                         StatusEquals="InProgress"):
        job = sagemaker.describe_training_job(TrainingJobName=summary["TrainingJobName"])
        jobs.append(plain({**job, "Tags": _tags_of(sagemaker, job["TrainingJobArn"])}))
    return jobs


def _notebooks(sagemaker: Any) -> list[dict[str, Any]]:
    notebooks = []
    for summary in pages(sagemaker, "list_notebook_instances", "NotebookInstances"):
        notebook = sagemaker.describe_notebook_instance(
            NotebookInstanceName=summary["NotebookInstanceName"])
        found = _tags_of(sagemaker, notebook["NotebookInstanceArn"])
        notebooks.append(plain({**notebook, "Tags": found}))
    return notebooks


def _endpoints(sagemaker: Any) -> list[dict[str, Any]]:
    """Endpoints with their endpoint configuration (the variants' instance types)."""
    configs: dict[str, Any] = {}
    endpoints = []
    for summary in pages(sagemaker, "list_endpoints", "Endpoints"):
        endpoint = sagemaker.describe_endpoint(EndpointName=summary["EndpointName"])
        config_name = endpoint.get("EndpointConfigName")
        if config_name and config_name not in configs:
            configs[config_name] = sagemaker.describe_endpoint_config(
                EndpointConfigName=config_name)
        endpoints.append(plain({**endpoint, "EndpointConfig": configs.get(config_name) or {},
                                "Tags": _tags_of(sagemaker, endpoint["EndpointArn"])}))
    return endpoints


# ---------------------------------------------------------------------------- normalizing


def training_job_resource(region: Region, job: Mapping[str, Any]) -> Resource:
    config = job.get("ResourceConfig") or {}
    groups = [g for g in config.get("InstanceGroups") or [] if isinstance(g, Mapping)]
    instance_type = config.get("InstanceType") or (groups[0].get("InstanceType") if groups
                                                   else None)
    count = config.get("InstanceCount") or sum(int(g.get("InstanceCount") or 0) for g in groups)
    running = job.get("TrainingJobStatus") == "InProgress"
    return region.resource(
        kind="aws_sagemaker_training_job", category=Category.TRAINING_JOB,
        id=str(job.get("TrainingJobArn") or job["TrainingJobName"]),
        name=str(job["TrainingJobName"]), tags=tags(job.get("Tags")),
        instance_type=instance_type, count=int(count or 1),
        capacity=Capacity.SPOT if job.get("EnableManagedSpotTraining") else Capacity.ON_DEMAND,
        encrypted=True, customer_key=bool(config.get("VolumeKmsKeyId")),
        checkpoint_uri=_checkpoint_uri(job),
        state=State.RUNNING if running else State.STOPPED,
        unknown=frozenset() if instance_type else TYPE_UNKNOWN, raw=dict(job),
    )


def _checkpoint_uri(job: Mapping[str, Any]) -> str | None:
    config = job.get("CheckpointConfig")
    uri = config.get("S3Uri") if isinstance(config, Mapping) else None
    return uri if isinstance(uri, str) and uri else None


def notebook_resource(region: Region, notebook: Mapping[str, Any]) -> Resource | None:
    status = str(notebook.get("NotebookInstanceStatus") or "")
    if status == "Deleting":
        return None
    return region.resource(
        kind="aws_sagemaker_notebook_instance", category=Category.NOTEBOOK,
        id=str(notebook.get("NotebookInstanceArn") or notebook["NotebookInstanceName"]),
        name=str(notebook["NotebookInstanceName"]), tags=tags(notebook.get("Tags")),
        instance_type=notebook.get("InstanceType"), capacity=Capacity.ON_DEMAND,
        encrypted=True, customer_key=bool(notebook.get("KmsKeyId")),
        state=_NOTEBOOK_STATES.get(status, State.UNKNOWN), raw=dict(notebook),
    )


def _notebook_resources(region: Region, notebook: Mapping[str, Any]) -> list[Resource]:
    found = notebook_resource(region, notebook)
    return [found] if found is not None else []


def endpoint_resources(region: Region, endpoint: Mapping[str, Any]) -> list[Resource]:
    """One ENDPOINT per instance-backed (not serverless) production variant."""
    status = str(endpoint.get("EndpointStatus") or "")
    if status in _ENDPOINT_GONE:
        return []
    config = endpoint.get("EndpointConfig") or {}
    current = {str(v.get("VariantName")): v for v in endpoint.get("ProductionVariants") or []
               if isinstance(v, Mapping)}
    arn = str(endpoint.get("EndpointArn") or endpoint["EndpointName"])
    found = []
    for variant in config.get("ProductionVariants") or []:
        if not isinstance(variant, Mapping) or not variant.get("InstanceType"):
            continue
        variant_name = str(variant.get("VariantName"))
        live = current.get(variant_name) or {}
        count = live.get("CurrentInstanceCount", variant.get("InitialInstanceCount")) or 0
        found.append(region.resource(
            kind="aws_sagemaker_endpoint", category=Category.ENDPOINT, id=f"{arn}/{variant_name}",
            name=f"{endpoint['EndpointName']}/{variant_name}", tags=tags(endpoint.get("Tags")),
            instance_type=variant["InstanceType"], count=int(count),
            capacity=Capacity.ON_DEMAND, encrypted=True,
            customer_key=bool(config.get("KmsKeyId")),
            state=State.STOPPED if status in _ENDPOINT_STOPPED else State.RUNNING,
            raw={**endpoint, "Variant": variant},
        ))
    return found


# ---------------------------------------------------------------------------- inventory entries

TRAINING_JOBS = section(
    "training_jobs", "sagemaker", lambda c, _: _training_jobs(c),
    ["sagemaker:ListTrainingJobs", "sagemaker:DescribeTrainingJob", "sagemaker:ListTags"],
    normalize=lambda region, j: [training_job_resource(region, j)])
NOTEBOOK_INSTANCES = section(
    "notebook_instances", "sagemaker", lambda c, _: _notebooks(c),
    ["sagemaker:ListNotebookInstances", "sagemaker:DescribeNotebookInstance",
     "sagemaker:ListTags"],
    normalize=_notebook_resources)
ENDPOINTS = section(
    "endpoints", "sagemaker", lambda c, _: _endpoints(c),
    ["sagemaker:ListEndpoints", "sagemaker:DescribeEndpoint",
     "sagemaker:DescribeEndpointConfig", "sagemaker:ListTags"],
    normalize=endpoint_resources)
