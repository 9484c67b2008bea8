"""Azure Resource Manager clients of one scan: how to reach ARM (`AzureSettings`), and the
management clients, made per subscription on first use. The SDKs are imported inside functions
only.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.core.errors import InputError, install_hint


@dataclass(frozen=True)
class AzureSettings:
    """How to reach Azure Resource Manager. Tests point `base_url` at a loopback server."""

    credential: Any = None  # None: DefaultAzureCredential
    base_url: str | None = None  # None: the public cloud's management endpoint
    # passed to every client: transport and retry options (connection_verify, retry_total, ...)
    client_kwargs: Mapping[str, Any] = field(default_factory=dict)


class AzureClients:
    """Management clients of one scan, made per subscription on first use and kept; the
    remediation executor reuses them."""

    def __init__(self, credential: Any, base_url: str | None = None,
                 client_kwargs: Mapping[str, Any] | None = None) -> None:
        self.credential = credential
        self.base_url = base_url
        self.client_kwargs = dict(client_kwargs or {})
        self._made: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def _client(self, kind: str, subscription: str) -> Any:
        with self._lock:
            key = (kind, subscription)
            if key not in self._made:
                self._made[key] = self._make(kind, subscription)
            return self._made[key]

    def _make(self, kind: str, subscription: str) -> Any:
        extra: dict[str, Any] = dict(self.client_kwargs)
        if self.base_url:
            extra["base_url"] = self.base_url
        if kind == "subscriptions":
            from azure.mgmt.resource.subscriptions import SubscriptionClient

            return SubscriptionClient(self.credential, **extra)
        if kind == "compute":
            from azure.mgmt.compute import ComputeManagementClient

            return ComputeManagementClient(self.credential, subscription, **extra)
        if kind == "resources":
            from azure.mgmt.resource.resources import ResourceManagementClient

            return ResourceManagementClient(self.credential, subscription, **extra)
        from azure.mgmt.containerservice import ContainerServiceClient

        return ContainerServiceClient(self.credential, subscription, **extra)

    def subscriptions(self) -> Any:
        return self._client("subscriptions", "")

    def compute(self, subscription: str) -> Any:
        return self._client("compute", subscription)

    def resources(self, subscription: str) -> Any:
        return self._client("resources", subscription)

    def containers(self, subscription: str) -> Any:
        return self._client("containers", subscription)


def connect(settings: AzureSettings | None = None) -> AzureClients:
    settings = settings or AzureSettings()
    try:  # fail early, with the extra to install, rather than once per subscription
        import azure.mgmt.compute
        import azure.mgmt.resource.resources
        import azure.mgmt.resource.subscriptions  # noqa: F401
        from azure.identity import DefaultAzureCredential
    except ModuleNotFoundError as exc:
        raise InputError(f"source 'azure' needs a package that is not installed: {exc.name} "
                         f"({install_hint('azure')})") from None
    credential = settings.credential or DefaultAzureCredential()
    return AzureClients(credential, settings.base_url, settings.client_kwargs)
