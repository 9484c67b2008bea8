"""Host name → Kubernetes node → cloud instance, by stable keys.

A DCGM series names its host (`Hostname`); NVML readings carry the node name. A host is matched
to a Kubernetes Node by name, `kubernetes.io/hostname` label or status address, the node's
`spec.providerID` names its cloud instance:

    aws:///us-east-1a/i-0abc...                      → AWS instance id
    gce://project/us-central1-a/name                 → GCE instance name + zone
    azure:///subscriptions/.../virtualMachines/name  → Azure VM id (scale-set VMs: the scale set)

and the instance is found among the scanned resources by its id (DESIGN's `resource.id`: the
AWS instance id or ARN, the GCP/Azure resource path). Without a node, the host name itself is
read: an EC2 private DNS name (`ip-10-0-1-23.ec2.internal`, matched by the instance's
`PrivateDnsName` or `PrivateIpAddress`) or resource name (`i-0abc....ec2.internal`), a GCE
internal name (`name.zone.c.project.internal`), or an instance name that is unique.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.core.model import Category, Resource, State

_AWS_ID = re.compile(r"(?:^|/)(i-[0-9a-f]{8,17})$")
_GCE_PATH = re.compile(r"zones/([^/]+)/instances/([^/]+)$")
_EC2_IP_NAME = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?:\.|$)")
_EC2_ID_NAME = re.compile(r"^(i-[0-9a-f]{8,17})(?:\.|$)")
_GCE_INTERNAL = re.compile(r"^([a-z0-9-]+)\.([a-z]+-[a-z]+\d+-[a-z])\.c\.[^.]+\.internal$")
_INSTANCE_CATEGORIES = frozenset({Category.INSTANCE, Category.AUTOSCALING_GROUP})
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")

Key = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CloudRef:
    """What a node's providerID says about its cloud instance."""

    provider: str  # aws | gcp | azure
    keys: tuple[Key, ...]  # instance-index keys, most specific first
    instance_id: str  # i-0abc, the GCE name, the Azure VM id
    zone: str | None = None

    @property
    def region(self) -> str | None:
        if self.zone is None:
            return None
        if self.provider == "aws":
            return self.zone.rstrip("abcdefghijklmnopqrstuvwxyz") or None
        if self.provider == "gcp":
            return self.zone.rsplit("-", 1)[0]
        return None


def parse_provider_id(provider_id: str | None) -> CloudRef | None:
    if not provider_id:
        return None
    if provider_id.startswith("aws://"):
        parts = provider_id.removeprefix("aws://").strip("/").split("/")
        instance = parts[-1]
        if not instance.startswith("i-"):
            return None
        zone = parts[-2] if len(parts) >= 2 else None
        return CloudRef("aws", (("aws-id", instance),), instance, zone)
    if provider_id.startswith("gce://"):
        parts = provider_id.removeprefix("gce://").split("/")
        if len(parts) != 3:
            return None
        _, zone, name = parts
        return CloudRef("gcp", (("gce", zone, name),), name, zone)
    if provider_id.startswith("azure://"):
        path = provider_id.removeprefix("azure://").lower()
        keys: list[Key] = [("azure", path)]
        scale_set = re.match(r"(.*/virtualmachinescalesets/[^/]+)/virtualmachines/[^/]+$", path)
        if scale_set:
            keys.append(("azure", scale_set.group(1)))
        return CloudRef("azure", tuple(keys), path)
    return None


def host_keys(hostname: str) -> list[Key]:
    """Instance-index keys a bare host name stands for."""
    host = hostname.lower()
    keys: list[Key] = [("dns", host)]
    by_ip = _EC2_IP_NAME.match(host)
    if by_ip:
        keys.append(("ip", ".".join(by_ip.groups())))
    by_id = _EC2_ID_NAME.match(host)
    if by_id:
        keys.append(("aws-id", by_id.group(1)))
    gce = _GCE_INTERNAL.match(host)
    if gce:
        keys.append(("gce", gce.group(2), gce.group(1)))
    keys.append(("name", host.split(".", 1)[0]))
    return keys


def _raw(resource: Resource, *path: str) -> Any:
    value: Any = resource.raw
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def instance_keys(resource: Resource) -> list[Key]:
    """The keys a scanned cloud instance (or VM scale set) is found by."""
    keys: list[Key] = []
    if resource.provider == "aws":
        found = _AWS_ID.search(resource.id) or _AWS_ID.search(str(_raw(resource, "InstanceId")
                                                                    or ""))
        if found:
            keys.append(("aws-id", found.group(1)))
        dns = _raw(resource, "PrivateDnsName")
        if isinstance(dns, str) and dns:
            keys.append(("dns", dns.lower()))
        address = _raw(resource, "PrivateIpAddress")
        if isinstance(address, str) and address:
            keys.append(("ip", address))
    elif resource.provider == "gcp":
        found = _GCE_PATH.search(resource.id)
        if found:
            keys.append(("gce", found.group(1), found.group(2)))
        hostname = _raw(resource, "hostname")
        if isinstance(hostname, str) and hostname:
            keys.append(("dns", hostname.lower()))
    elif resource.provider == "azure":
        keys.append(("azure", resource.id.lower()))
        computer = _raw(resource, "properties", "osProfile", "computerName")
        if isinstance(computer, str) and computer:
            keys.append(("name", computer.lower()))
    if resource.provider in ("aws", "gcp", "azure") and resource.name:
        keys.append(("name", resource.name.lower()))
    return keys


class NodeIndex:
    """Kubernetes Nodes by every name a DCGM `Hostname` label may carry."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]]):
        self._by_name: dict[str, Mapping[str, Any] | None] = {}
        for node in nodes:
            for name in _node_names(node):
                # a name two nodes share identifies neither
                self._by_name[name] = node if name not in self._by_name else None

    def find(self, hostname: str | None) -> Mapping[str, Any] | None:
        if not hostname:
            return None
        host = hostname.lower()
        return self._by_name.get(host) or self._by_name.get(host.split(".", 1)[0])


def _node_names(node: Mapping[str, Any]) -> set[str]:
    metadata = node.get("metadata") or {}
    names = {str(metadata.get("name") or "")}
    labels = metadata.get("labels") or {}
    names.add(str(labels.get("kubernetes.io/hostname") or ""))
    status = node.get("status") or {}
    for address in status.get("addresses") or []:
        if isinstance(address, dict) and address.get("type") in (
                "Hostname", "InternalDNS", "ExternalDNS", "InternalIP"):
            names.add(str(address.get("address") or ""))
    names = {name.lower() for name in names if name}
    return names | {name.split(".", 1)[0] for name in names if not _is_ip(name)}


def _is_ip(text: str) -> bool:
    return bool(re.fullmatch(r"[\d.]+|[0-9a-f:]+", text))


def node_provider_id(node: Mapping[str, Any]) -> str | None:
    spec = node.get("spec") or {}
    value = spec.get("providerID") if isinstance(spec, dict) else None
    return value if isinstance(value, str) else None


def node_label(node: Mapping[str, Any], *names: str) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for name in names:
        if isinstance(labels.get(name), str) and labels[name]:
            return str(labels[name])
    return None


class InstanceIndex:
    """Scanned cloud instances (and VM scale sets) by their keys; ambiguous keys are dropped."""

    def __init__(self, resources: Iterable[Resource]):
        self._by_key: dict[Key, Resource | None] = {}
        for resource in resources:
            if resource.category not in _INSTANCE_CATEGORIES or resource.state is State.PLANNED:
                continue
            for key in instance_keys(resource):
                self._by_key[key] = resource if key not in self._by_key else None

    def find(self, keys: Iterable[Key]) -> Resource | None:
        for key in keys:
            found = self._by_key.get(key)
            if found is not None:
                return found
        return None


class HostResolver:
    """Host name → (Kubernetes node, its cloud ref, the scanned instance resource)."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]], resources: Iterable[Resource]):
        self.nodes = NodeIndex(nodes)
        self.instances = InstanceIndex(resources)
        self._resolved: dict[str, tuple[Mapping[str, Any] | None, CloudRef | None,
                                        Resource | None]] = {}

    def resolve(self, hostname: str | None
                ) -> tuple[Mapping[str, Any] | None, CloudRef | None, Resource | None]:
        if not hostname:
            return None, None, None
        if hostname not in self._resolved:  # eight GPUs a host: resolve each host once
            self._resolved[hostname] = self._resolve(hostname)
        return self._resolved[hostname]

    def _resolve(self, hostname: str
                 ) -> tuple[Mapping[str, Any] | None, CloudRef | None, Resource | None]:
        node = self.nodes.find(hostname)
        cloud = parse_provider_id(node_provider_id(node)) if node is not None else None
        instance = self.instances.find(cloud.keys) if cloud is not None else None
        if instance is None:
            instance = self.instances.find(host_keys(hostname))
        return node, cloud, instance
