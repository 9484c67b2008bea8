"""Live Azure source: subscriptions, VMs, managed disks and AKS agent pools → `Resource` models.

Reads through the official management clients: the subscriptions named (`--subscription`) or
every one the credential can see (azure-mgmt-resource-subscriptions), then per subscription
azure-mgmt-compute for virtual machines (two paged lists: the models, and `statusOnly=true` for
their power states, so the number of calls does not grow with the number of VMs) and managed
disks, and azure-mgmt-containerservice for AKS clusters with their agent pools when that package
is installed. Credentials come from `DefaultAzureCredential` (environment, workload or managed
identity, Azure CLI). The SDKs are imported inside functions only.

What it decides, and why (matching the Terraform adapter, so both doors give one verdict):

- **Ids** are the full ARM ids; `kind` is the Terraform type (`azurerm_linux_virtual_machine`,
  `azurerm_windows_virtual_machine`, `azurerm_managed_disk`,
  `azurerm_kubernetes_cluster_node_pool`) so advice names the attribute to change.
- **Capacity** is spot for `priority` Spot (or the older Low priority); AKS pools by their
  `scaleSetPriority`.
- **State** follows billing: a VM is stopped only when deallocated (or deallocating); a VM
  stopped from inside the OS keeps its hardware and its bill, so it counts as running.
- **Tags** are the resource's tags; the subscription's tags are the fallback for production.
  A disk carries the tags of the VM that manages it under its own; an AKS pool carries its
  cluster's tags and its node labels under its own tags.
- **Disks** are always platform-encrypted; `customer_key` when a disk encryption set (customer
  managed key) protects them.
- **Partial failures** (one subscription denied, throttled past the retries) become warnings and
  the scan goes on; when every subscription fails, the scan fails with the first reason.

Modules: `clients` (settings, management clients), `failures` (errors in one line), `readers`
(listing subscriptions, VMs, disks and AKS clusters), `normalizers` (objects to resources),
`shapes` (the snapshot objects' expected fields), `snapshot` (the `azure:` section). This
package holds the settings `collect` connects with: replace `SETTINGS` to point the source
elsewhere.
"""

from __future__ import annotations

from typing import Any

from engine.core.catalog import Catalog
from engine.core.errors import InputError
from engine.sources.azure.clients import AzureClients, AzureSettings, connect
from engine.sources.azure.failures import SubscriptionFailed, describe_error
from engine.sources.azure.normalizers import (
    DISK_KIND,
    LINUX_VM_KIND,
    NODE_POOL_KIND,
    WINDOWS_VM_KIND,
    ArmId,
    disk_customer_key,
    disk_resource,
    estate_resources,
    node_pool_resources,
    parse_arm_id,
    power_state,
    vm_resource,
    vm_state,
)
from engine.sources.azure.readers import (
    SubscriptionEstate,
    list_estate,
    list_subscription,
    list_subscriptions,
    plain,
)
from engine.sources.azure.snapshot import azure_snapshot, read_snapshot_section
from engine.sources.azure.vm_sizes import learned_catalog, read_vm_sizes
from engine.sources.collected import Collected, ScanOptions, within_account_limit

__all__ = [
    "DISK_KIND",
    "LINUX_VM_KIND",
    "NODE_POOL_KIND",
    "SETTINGS",
    "WINDOWS_VM_KIND",
    "ArmId",
    "AzureClients",
    "AzureSettings",
    "SubscriptionEstate",
    "SubscriptionFailed",
    "azure_snapshot",
    "collect",
    "connect",
    "describe_error",
    "disk_customer_key",
    "disk_resource",
    "estate_resources",
    "list_estate",
    "list_subscription",
    "list_subscriptions",
    "node_pool_resources",
    "parse_arm_id",
    "plain",
    "power_state",
    "read_snapshot_section",
    "vm_resource",
    "vm_state",
]

# The settings `collect` connects with; replace them to point the source elsewhere.
SETTINGS = AzureSettings()


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source azure` (or `azure:SUBSCRIPTION[,SUBSCRIPTION]`): those named, else all visible."""
    wanted = [s.strip() for s in arg.split(",")] if arg else list(options.subscriptions)
    if options.organization and wanted:
        raise InputError("azure: give --organization or name subscriptions, not both")
    clients = connect(SETTINGS)
    subscriptions, found_warnings = _subscriptions_to_scan(clients, wanted, options)
    estates, warnings = list_estate(clients, subscriptions, options.max_workers)
    vm_sizes, size_warnings = read_vm_sizes(clients, estates, catalog)
    return Collected(
        resources=estate_resources(estates, learned_catalog(catalog, vm_sizes)),
        snapshot={"azure": azure_snapshot(estates, vm_sizes)},
        clients={"azure": clients},
        warnings=found_warnings + warnings + size_warnings,
    )


def _subscriptions_to_scan(clients: AzureClients, wanted: list[str], options: ScanOptions
                           ) -> tuple[list[dict[str, Any]], list[str]]:
    """Those named, else every enabled one the credential sees; with `--organization`, at most
    `--max-accounts` of them (a warning for the rest)."""
    subscriptions = list_subscriptions(clients, wanted)
    warnings: list[str] = []
    if options.organization:
        subscriptions = within_account_limit(subscriptions, options.max_accounts,
                                             "azure: enabled subscriptions", warnings)
    return subscriptions, warnings
