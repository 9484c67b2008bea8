"""Live Google Cloud source: projects, Compute Engine instances and disks, GKE node pools →
`Resource` models.

Reads through the official clients: google-cloud-resource-manager for the projects to scan (all
the credentials can see, unless `--project` names them) and their labels, google-cloud-compute
for instances and disks of every zone and region (one aggregated list per project and kind), the
GKE API over an authorized session for clusters and their node pools (`gke_readers`, `gke`).
Credentials are Application Default Credentials. The SDKs are imported inside functions only.

What it decides, and why (matching the Terraform adapter, so both doors give one verdict):

- **Ids** are the full resource paths (`projects/P/zones/Z/instances/N`); `kind` is the
  Terraform type (`google_compute_instance`, `google_compute_disk`, `google_compute_region_disk`)
  so advice names the attribute to change.
- **GPUs**: a machine type the catalog knows (a2, a3, g2: GPUs built in) wins; otherwise the
  attached `guestAccelerators`, priced per accelerator.
- **Capacity** is spot when `scheduling.provisioningModel` is SPOT or `scheduling.preemptible`.
- **Tags** are the instance's `labels` (network `tags` are firewall targets, not metadata); the
  project's labels are the fallback for production, like a Kubernetes namespace's labels.
- **Disks** are VOLUME resources, always encrypted by the platform; `customer_key` when a Cloud
  KMS key (CMEK) or a customer-supplied key protects them. A disk carries the labels of the
  instance using it under its own, so an exemption on an instance covers its disks.
- **Partial failures** (one project denied, throttled past the retries) become warnings and the
  scan goes on; when every project fails, the scan fails with the first project's reason.

Modules: `clients` (settings, clients, retries), `failures` (errors in one line), `readers`
(listing projects, instances and disks), `hierarchy` (the projects under `--folder` nodes),
`normalizers` (objects to resources), `shapes` (the snapshot objects' expected fields),
`snapshot` (the `gcp:` section). This package holds the settings `collect` connects with:
replace `SETTINGS` to point the source elsewhere.
"""

from __future__ import annotations

from typing import Any

from engine.core.catalog import Catalog
from engine.core.errors import InputError
from engine.sources.collected import Collected, ScanOptions, within_account_limit
from engine.sources.gcp.clients import SCOPES, GcpClients, GcpSettings, RetryAfter, connect
from engine.sources.gcp.estate import estate_resources
from engine.sources.gcp.failures import ProjectFailed, describe_error
from engine.sources.gcp.gke import NODE_POOL_KIND, node_pool_resource
from engine.sources.gcp.hierarchy import projects_under
from engine.sources.gcp.machine_types import learned_catalog, read_machine_types
from engine.sources.gcp.normalizers import (
    DISK_KIND,
    INSTANCE_KIND,
    REGION_DISK_KIND,
    attached_gpus,
    disk_customer_key,
    disk_resource,
    instance_capacity,
    instance_resource,
    instance_state,
    last_segment,
    resource_path,
    zone_region,
)
from engine.sources.gcp.readers import ProjectEstate, list_estate, list_project, list_projects
from engine.sources.gcp.snapshot import gcp_snapshot, read_snapshot_section

__all__ = [
    "DISK_KIND",
    "INSTANCE_KIND",
    "NODE_POOL_KIND",
    "REGION_DISK_KIND",
    "SCOPES",
    "SETTINGS",
    "GcpClients",
    "GcpSettings",
    "ProjectEstate",
    "ProjectFailed",
    "RetryAfter",
    "attached_gpus",
    "collect",
    "connect",
    "describe_error",
    "disk_customer_key",
    "disk_resource",
    "estate_resources",
    "gcp_snapshot",
    "instance_capacity",
    "instance_resource",
    "instance_state",
    "last_segment",
    "list_estate",
    "list_project",
    "list_projects",
    "node_pool_resource",
    "read_snapshot_section",
    "resource_path",
    "zone_region",
]

# The settings `collect` connects with; replace them to point the source elsewhere.
SETTINGS = GcpSettings()


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source gcp` (or `gcp:PROJECT[,PROJECT]`): the projects named, else all visible."""
    wanted = [p.strip() for p in arg.split(",")] if arg else list(options.projects)
    if options.organization and wanted:
        raise InputError("gcp: give --organization (or --folder) or name projects, not both")
    clients = connect(SETTINGS)
    projects, found_warnings = _projects_to_scan(clients, wanted, options)
    estates, warnings = list_estate(clients, projects, options.max_workers)
    machine_types, type_warnings = read_machine_types(clients, estates, catalog)
    return Collected(
        resources=estate_resources(estates, learned_catalog(catalog, machine_types)),
        snapshot={"gcp": gcp_snapshot(estates, machine_types)},
        clients={"gcp": clients},
        warnings=found_warnings + warnings + type_warnings,
    )


def _projects_to_scan(clients: GcpClients, wanted: list[str], options: ScanOptions
                      ) -> tuple[list[dict[str, Any]], list[str]]:
    """Those named; else under `--folder`; else every active one visible (at most
    `--max-accounts` of them with `--organization`)."""
    if options.folders:
        return projects_under(clients, options.folders, options.max_accounts)
    warnings: list[str] = []
    projects = list_projects(clients, wanted)
    if options.organization:
        projects = within_account_limit(projects, options.max_accounts,
                                        "gcp: active projects", warnings)
    return projects, warnings
