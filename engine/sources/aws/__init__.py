"""Live AWS source: read GPU spend through boto3 and normalize it into `Resource` models.

`--source aws` lists, per account and region, EC2 instances and EBS volumes, launch templates,
autoscaling groups, EKS managed node groups, and SageMaker training jobs (in progress), notebook
instances and endpoints. Every list is paginated; (account, region) pairs are read concurrently
by a bounded thread pool; botocore retries in adaptive mode. boto3 is imported inside functions
only.

The package, one concept per module:

- `clients`: boto3 clients per (account, region, service), retries, CLIENT_HOOKS;
- `failures`: a failed call classified in one line, and the scan's warnings;
- `discovery`: accounts (ambient or assumed roles) and their enabled regions;
- `organization`: `--organization`, every ACTIVE account of the AWS Organization through one
  role name (also the fan-out's targets);
- `inventory`: every section a region scan reads, each entry (`section.AwsSection`) carrying
  its reader, its normalizer and the IAM actions it calls; the entries live by concept in
  `compute` (instances, launch templates, autoscaling groups, EKS node groups), `storage` (EBS
  volumes, encryption default, AWS managed keys) and `ml` (SageMaker);
- `region`: one scanned (account, region) as the normalizers see it, with its joins;
- `scan`: `collect` and `scan_region`; `snapshot`: the `aws:` section of a snapshot;
- `permissions`: IAM actions declared next to the code that calls them.

Reading and normalizing are separate: `scan_region` returns the native describe/list objects
(made JSON-safe), `region_resources` turns them into resources without any I/O. The natives are
the snapshot's `aws:` section, so `--save-snapshot` then `--source snapshot:FILE` replays a scan.
AWS field names stay inside this package.

Conventions shared with the Terraform adapter (the same resource gives the same verdict through
either door): `kind` is the Terraform type (`aws_instance`, `aws_ebs_volume`, ...); instances
and volumes are keyed by their ids, launch templates by `lt-...`, everything else by its ARN
(endpoint variants: `<endpoint ARN>/<variant>`). What each kind decides on top is in its
concept's module.
"""

from __future__ import annotations

from engine.sources.aws.clients import (
    CLIENT_HOOKS,
    RETRY_ATTEMPTS,
    Account,
    AwsClients,
    apply_client_hooks,
    make_client,
)
from engine.sources.aws.compute import (
    autoscaling_group_resource,
    instance_resource,
    launch_template_resources,
    node_group_resource,
)
from engine.sources.aws.discovery import SESSION_NAME, account_regions, base_session, connect
from engine.sources.aws.failures import CallFailure, classify
from engine.sources.aws.inventory import SECTIONS, read_actions, region_resources
from engine.sources.aws.ml import endpoint_resources, notebook_resource, training_job_resource
from engine.sources.aws.scan import collect, scan_region
from engine.sources.aws.snapshot import read_snapshot_section
from engine.sources.aws.storage import customer_key, volume_resource

__all__ = [
    "CLIENT_HOOKS",
    "RETRY_ATTEMPTS",
    "SECTIONS",
    "SESSION_NAME",
    "Account",
    "AwsClients",
    "CallFailure",
    "account_regions",
    "apply_client_hooks",
    "autoscaling_group_resource",
    "base_session",
    "classify",
    "collect",
    "connect",
    "customer_key",
    "endpoint_resources",
    "instance_resource",
    "launch_template_resources",
    "make_client",
    "node_group_resource",
    "notebook_resource",
    "read_actions",
    "read_snapshot_section",
    "region_resources",
    "scan_region",
    "training_job_resource",
    "volume_resource",
]
