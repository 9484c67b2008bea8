"""Reading an Azure estate: the subscriptions to scan, and the VMs (with power states), managed
disks and AKS clusters of each, subscriptions concurrently in a bounded pool, as the ARM API
serves them (`SubscriptionEstate`). Partial failures become warnings.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engine.core.errors import InputError, install_hint
from engine.sources.azure.clients import AzureClients
from engine.sources.azure.failures import SubscriptionFailed, describe_error

_DISABLED_SUBSCRIPTIONS = frozenset({"disabled", "deleted"})


@dataclass
class SubscriptionEstate:
    """One subscription as listed: its objects as the ARM API serves them (camelCase JSON)."""

    subscription: dict[str, Any]
    virtual_machines: list[dict[str, Any]] = field(default_factory=list)
    disks: list[dict[str, Any]] = field(default_factory=list)
    managed_clusters: list[dict[str, Any]] = field(default_factory=list)

    @property
    def subscription_id(self) -> str:
        return str(self.subscription.get("subscriptionId") or "")


def plain(model: Any) -> dict[str, Any]:
    """An SDK model as the ARM API's JSON object (camelCase keys, `properties` nesting)."""
    serialize = getattr(model, "serialize", None)
    if callable(serialize):  # msrest-based SDK versions
        found: dict[str, Any] = serialize(keep_readonly=True)
        return found
    return dict(model.as_dict())


def list_subscriptions(clients: AzureClients, wanted: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The subscriptions to scan: those named (with their tags when readable), else every
    enabled one the credential can see."""
    names = [s for s in wanted if s]
    if names:
        return [_named_subscription(clients, name) for name in names]
    try:
        found = [plain(s) for s in clients.subscriptions().subscriptions.list()]
    except Exception as exc:
        message, _ = describe_error(exc)
        raise InputError(f"azure: cannot list subscriptions: {message}") from None
    return [s for s in found if str(s.get("state") or "").lower() not in _DISABLED_SUBSCRIPTIONS]


def _named_subscription(clients: AzureClients, subscription_id: str) -> dict[str, Any]:
    from azure.core.exceptions import ClientAuthenticationError

    try:
        return plain(clients.subscriptions().subscriptions.get(subscription_id))
    except ClientAuthenticationError as exc:
        message, _ = describe_error(exc)
        raise InputError(f"azure: {message}") from None
    except Exception:
        return {"subscriptionId": subscription_id}


def list_subscription(clients: AzureClients,
                      subscription: dict[str, Any]) -> tuple[SubscriptionEstate, list[str]]:
    """VMs (with power state), disks and AKS clusters of one subscription, and its warnings.

    Raises SubscriptionFailed when the VMs or disks cannot be listed; AKS failures are warnings.
    """
    estate = SubscriptionEstate(subscription=subscription)
    sub = estate.subscription_id
    try:
        compute = clients.compute(sub)
        estate.virtual_machines = [plain(vm) for vm in compute.virtual_machines.list_all()]
        views = {str(vm.get("id") or "").lower(): (vm.get("properties") or {}).get("instanceView")
                 for vm in map(plain, compute.virtual_machines.list_all(status_only="true"))}
        for vm in estate.virtual_machines:
            view = views.get(str(vm.get("id") or "").lower())
            if view is not None:
                vm.setdefault("properties", {})["instanceView"] = view
        estate.disks = [plain(disk) for disk in compute.disks.list()]
    except Exception as exc:
        message, auth = describe_error(exc)
        raise SubscriptionFailed(f"azure: subscription {sub}: {message}; skipped",
                                 auth=auth) from exc
    return estate, _list_clusters(clients, estate)


def _list_clusters(clients: AzureClients, estate: SubscriptionEstate) -> list[str]:
    sub = estate.subscription_id
    try:
        containers = clients.containers(sub)
    except ModuleNotFoundError:
        return [f"azure: subscription {sub}: AKS node pools not scanned "
                f"({install_hint('azure')})"]
    try:
        estate.managed_clusters = [plain(c) for c in containers.managed_clusters.list()]
    except Exception as exc:
        message, _ = describe_error(exc)
        return [f"azure: subscription {sub}: AKS clusters: {message}; skipped"]
    return []


def list_estate(clients: AzureClients, subscriptions: list[dict[str, Any]],
                max_workers: int = 8) -> tuple[list[SubscriptionEstate], list[str]]:
    """Every subscription listed (concurrently, in a bounded pool); failures become warnings.

    Raises InputError when there is nothing to scan or every subscription failed.
    """
    if not subscriptions:
        raise InputError("azure: no enabled subscriptions visible to this credential (name "
                         "them with --subscription)")
    workers = max(1, min(max_workers, len(subscriptions)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(lambda s: _try_subscription(clients, s), subscriptions))
    estates: list[SubscriptionEstate] = []
    warnings: list[str] = []
    failures: list[SubscriptionFailed] = []
    for outcome in outcomes:
        if isinstance(outcome, SubscriptionFailed):
            failures.append(outcome)
            warnings.append(str(outcome))
        else:
            estates.append(outcome[0])
            warnings.extend(outcome[1])
    if failures and not estates:
        reason = str(failures[0]).removesuffix("; skipped")
        more = f" (and {len(failures) - 1} more subscriptions)" if len(failures) > 1 else ""
        raise InputError(f"{reason}{more}")
    return estates, warnings


def _try_subscription(
    clients: AzureClients, subscription: dict[str, Any]
) -> tuple[SubscriptionEstate, list[str]] | SubscriptionFailed:
    try:
        return list_subscription(clients, subscription)
    except SubscriptionFailed as failed:
        return failed
