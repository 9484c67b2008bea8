"""The fields of the ARM objects in an `azure:` snapshot section that the normalizers read, with
the types they expect (`engine.sources.sections.check_shape`).
"""

from __future__ import annotations

from engine.sources.sections import Count, Labels, ObjectShape


class _Code(ObjectShape):
    code: str | None = None


class _Located(ObjectShape):
    id: str | None = None
    name: str | None = None
    location: str | None = None
    tags: Labels | None = None


class _VmProperties(ObjectShape):
    class _Storage(ObjectShape):
        class _OsDisk(ObjectShape):
            osType: str | None = None

        osDisk: _OsDisk | None = None

    class _Hardware(ObjectShape):
        vmSize: str | None = None

    class _InstanceView(ObjectShape):
        statuses: list[_Code] | None = None

    storageProfile: _Storage | None = None
    hardwareProfile: _Hardware | None = None
    instanceView: _InstanceView | None = None
    priority: str | None = None


class _VirtualMachine(_Located):
    properties: _VmProperties | None = None


class _DiskProperties(ObjectShape):
    class _Encryption(ObjectShape):
        type: str | None = None
        diskEncryptionSetId: str | None = None

    class _Security(ObjectShape):
        secureVMDiskEncryptionSetId: str | None = None

    diskState: str | None = None
    encryption: _Encryption | None = None
    securityProfile: _Security | None = None


class _Disk(_Located):
    managedBy: str | None = None
    properties: _DiskProperties | None = None


class _AgentPool(ObjectShape):
    name: str | None = None
    count: Count | None = None
    vmSize: str | None = None
    scaleSetPriority: str | None = None
    powerState: _Code | None = None
    nodeLabels: Labels | None = None
    tags: Labels | None = None


class _ClusterProperties(ObjectShape):
    powerState: _Code | None = None
    agentPoolProfiles: list[_AgentPool] | None = None


class _ManagedCluster(_Located):
    properties: _ClusterProperties | None = None


class SubscriptionShape(ObjectShape):
    subscriptionId: str | None = None
    tags: Labels | None = None


SECTION_SHAPES: dict[str, type[ObjectShape]] = {
    "virtual_machines": _VirtualMachine, "disks": _Disk, "managed_clusters": _ManagedCluster,
}
SECTION_LISTS = tuple(SECTION_SHAPES)
