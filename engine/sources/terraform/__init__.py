"""Terraform plan adapter: `terraform show -json PLAN` output → normalized `Resource` models.

Only this package knows Terraform and provider field names. What it decides, and why:

- **Which changes count.** `resource_changes[].change.after` of managed resources whose actions
  are create, update or a replace in either order (`["delete","create"]`,
  `["create","delete"]`). Deletes, reads, no-ops, `forget` and data sources are skipped; no-op
  changes still serve joins (the launch template an autoscaling group names). The cost diff
  (`plan_cost_changes`) also reads deletes and the `before` side of updates, through the same
  normalizers, without adding them to what policies evaluate.
- **Ids and names.** `id` and `name` are both the full resource address
  (`module.train.aws_instance.gpu[0]`): it is what a reviewer greps for and what baselines key on.
  Disks with their own encryption settings become VOLUME resources whose id is the address plus
  the block (`aws_instance.gpu.root_block_device[0]`, kind `aws_instance.root_block_device`);
  SageMaker endpoint variants likewise (`...production_variants[0]`).
- **Only mapped types** are returned (`SUPPORTED_TYPES`), so summary counts mean something.
- **Three-valued.** A value Terraform shows as unknown (`after_unknown`) or sensitive is never
  guessed: its normalized path lands in `Resource.unknown` (instance type → `instance_type`,
  `gpu`, `hourly_usd`; tags → `tags` or `tags.<key>`; encryption → `encrypted`; spot markers →
  `capacity`; sizes → `count`). Following Terraform's own semantics, an unknown argument the
  configuration does not set is the provider's computed default (EKS `capacity_type` →
  ON_DEMAND, no GCE `guest_accelerator` → no GPUs), and an unknown key reference it does set
  (`kms_key_id = aws_kms_key.k.arn`) is a key. Terraform leaves `dynamic` blocks out of the
  configuration it prints, so a dynamic block whose `for_each` is unknown reads as unset.
- **Secrets.** Values marked in `after_sensitive`, and attributes that are always secret
  (passwords, raw disk keys: plans before Terraform 0.15 print them in clear), are replaced with
  `"(sensitive)"` before anything is read, so they cannot reach a Resource, its `raw` or a report.
  A sensitive value is unknown to the policies.
- **Tags.** `tags_all` (which holds provider `default_tags`) before `tags`; when `tags_all` is
  unknown, the provider block's constant `default_tags` are merged under `tags`. GCP:
  `terraform_labels`, then `effective_labels`, then `labels`. Kubernetes node labels of node
  groups/pools sit under the cloud tags. An autoscaling group's tags are those it propagates to
  its instances (the ones the spend is attributed by) plus any `gpuwarden*` control tag; a launch
  template's include its instance `tag_specifications`.
- **Encryption.** EBS `encrypted` unset in a plan is unknown (account default encryption may
  apply); every aws_instance has a root VOLUME even when the plan shows no root_block_device. GCE
  and Azure managed disks are always platform-encrypted; the customer key is a KMS key / disk
  encryption set. S3 encrypts every new bucket with SSE-S3 since January 2023, so a bucket is
  `encrypted=True`; `customer_key` is True only for `aws:kms` with a key id, from the bucket's
  inline block or an `aws_s3_bucket_server_side_encryption_configuration` in the same plan (joined
  by reference or bucket name). SageMaker always encrypts its ML volumes; `customer_key` follows
  its KMS key argument.
- **Prices.** The catalog fills GPU spec and list price (`engine.core.enrich`). SageMaker `ml.`
  types use the matching EC2 type (a lower bound: SageMaker adds a premium). GCE/GKE machines with
  attached `guest_accelerator`s get the accelerators' price only (the machine part is not in the
  catalog).
- **Region** from the resource (`region`, `availability_zone`, `zone`, `location`; zones cut to
  their region), else the provider block's constant `region`.
- `raw` shares unchanged subtrees with the plan document (no copies): treat it as read-only.

Modules, each importing only those listed before it: `redaction` (secrets), `attributes` (one
planned object and its marks), `addresses` (module addresses), `document` (a plan's shape),
`reading` (plan files: bounds, encodings), `plan_index` (joins across the plan), `registry`
(normalizers by type), `readers` and `build` (shared by the normalizers), the normalizers per
cloud (`aws`, `aws_sagemaker`, `gcp`, `azure`, registered by importing them here), `normalized`
(one normalization of a plan's changes), `resources` (what policies evaluate), `cost_changes`
(the cost diff; `plan_inputs` gives both from one normalization, `read_plan_inputs` from
plan files), and `locations` (`.tf` file and line of a resource block).
"""

from __future__ import annotations

# The normalizers register themselves with `registry` when imported: all of them, here.
from engine.sources.terraform import aws, aws_sagemaker, azure, gcp  # noqa: F401
from engine.sources.terraform.addresses import module_names
from engine.sources.terraform.attributes import KNOWN_AFTER_APPLY, Attrs
from engine.sources.terraform.cost_changes import (
    PlanCostChange,
    PlanInputs,
    plan_cost_changes,
    plan_inputs,
    read_plan_inputs,
)
from engine.sources.terraform.document import SUPPORTED_FORMAT_MAJORS, check_plan_document
from engine.sources.terraform.plan_index import (
    NO_CONFIGURATION,
    NOT_CONSTANT,
    PlanIndex,
    PlannedChange,
)
from engine.sources.terraform.reading import read_plan
from engine.sources.terraform.redaction import SENSITIVE, redact_sensitive
from engine.sources.terraform.registry import Normalizer, normalizer, supported_types
from engine.sources.terraform.resources import plan_resources

SUPPORTED_TYPES: frozenset[str] = supported_types()

__all__ = [
    "KNOWN_AFTER_APPLY",
    "NOT_CONSTANT",
    "NO_CONFIGURATION",
    "SENSITIVE",
    "SUPPORTED_FORMAT_MAJORS",
    "SUPPORTED_TYPES",
    "Attrs",
    "Normalizer",
    "PlanCostChange",
    "PlanIndex",
    "PlanInputs",
    "PlannedChange",
    "check_plan_document",
    "module_names",
    "normalizer",
    "plan_cost_changes",
    "plan_inputs",
    "plan_resources",
    "read_plan",
    "read_plan_inputs",
    "redact_sensitive",
]
