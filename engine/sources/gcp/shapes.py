"""The fields of the Google Cloud objects in a `gcp:` snapshot section that the normalizers read,
with the types they expect (`engine.sources.sections.check_shape`).
"""

from __future__ import annotations

from engine.sources.sections import Count, Labels, ObjectShape


class _Accelerator(ObjectShape):
    acceleratorCount: Count | None = None
    acceleratorType: str | None = None


class _Scheduling(ObjectShape):
    provisioningModel: str | None = None
    preemptible: bool | None = None


class _Located(ObjectShape):
    name: str | None = None
    zone: str | None = None
    region: str | None = None
    selfLink: str | None = None
    labels: Labels | None = None


class _Instance(_Located):
    machineType: str | None = None
    status: str | None = None
    scheduling: _Scheduling | None = None
    guestAccelerators: list[_Accelerator] | None = None


class _DiskKey(ObjectShape):
    kmsKeyName: str | None = None
    sha256: str | None = None
    rsaEncryptedKey: str | None = None


class _Disk(_Located):
    users: list[str] | None = None
    diskEncryptionKey: _DiskKey | None = None


class ProjectShape(ObjectShape):
    projectId: str | None = None
    labels: Labels | None = None


class _PoolAccelerator(ObjectShape):
    acceleratorCount: Count | str | None = None  # an int64: a string in the API's JSON
    acceleratorType: str | None = None


class _PoolConfig(ObjectShape):
    machineType: str | None = None
    accelerators: list[_PoolAccelerator] | None = None
    spot: bool | None = None
    preemptible: bool | None = None
    labels: Labels | None = None
    resourceLabels: Labels | None = None


class _Autoscaling(ObjectShape):
    enabled: bool | None = None
    minNodeCount: Count | None = None
    maxNodeCount: Count | None = None
    totalMinNodeCount: Count | None = None
    totalMaxNodeCount: Count | None = None


class _NodePool(ObjectShape):
    name: str | None = None
    config: _PoolConfig | None = None
    initialNodeCount: Count | None = None
    autoscaling: _Autoscaling | None = None
    locations: list[str] | None = None
    gpuwardenNodeCount: Count | None = None


class _Cluster(ObjectShape):
    name: str | None = None
    location: str | None = None
    locations: list[str] | None = None
    resourceLabels: Labels | None = None
    nodePools: list[_NodePool] | None = None


SECTION_SHAPES: dict[str, type[ObjectShape]] = {"instances": _Instance, "disks": _Disk,
                                                "clusters": _Cluster}
