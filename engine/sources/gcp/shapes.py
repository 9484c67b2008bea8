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


SECTION_SHAPES: dict[str, type[ObjectShape]] = {"instances": _Instance, "disks": _Disk}
