"""What one entry of the AWS inventory carries: a section of a region's scan, how it is read,
the IAM actions the read calls, and, for a resource type, how its items become resources."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.core.model import Resource
from engine.sources.aws.permissions import iam_actions
from engine.sources.aws.region import Region

Reader = Callable[[Any, Mapping[str, Any]], Any]  # (client, the scan so far) → the section
Normalizer = Callable[[Region, Mapping[str, Any]], list[Resource]]  # one native → resources


@dataclass(frozen=True, slots=True)
class AwsSection:
    """One section of a scanned (account, region). `normalize` is None for sections that only
    inform others (a region's encryption default, AWS managed keys, launch configurations)."""

    name: str  # its key in the scan and in the snapshot's `aws:` entries
    service: str  # the boto3 client that reads it
    read: Reader
    reads: frozenset[str]  # the IAM actions `read` calls
    normalize: Normalizer | None = None
    # The natives to normalize, when not every item of the section (duplicates dropped, ...).
    select: Callable[[Region], Iterable[Mapping[str, Any]]] | None = None
    needs: str | None = None  # a section that must have been read first

    def natives(self, region: Region) -> Iterable[Mapping[str, Any]]:
        return self.select(region) if self.select is not None else region.items(self.name)


def section(name: str, service: str, read: Reader, reads: Iterable[str], **more: Any
            ) -> AwsSection:
    """An AwsSection whose IAM actions are checked to be well formed."""
    return AwsSection(name, service, read, iam_actions(reads), **more)
