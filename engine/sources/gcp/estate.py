"""A scanned (or replayed) Google Cloud estate as resources: Compute Engine instances and disks
(`normalizers`), GKE node pools (`gke`)."""

from __future__ import annotations

from collections.abc import Iterable

from engine.core.catalog import Catalog
from engine.core.model import Resource
from engine.sources.gcp.gke import cluster_resources
from engine.sources.gcp.normalizers import compute_resources, project_labels
from engine.sources.gcp.readers import ProjectEstate


def estate_resources(estates: Iterable[ProjectEstate], catalog: Catalog) -> list[Resource]:
    found: list[Resource] = []
    for estate in estates:
        found.extend(compute_resources(estate, catalog))
        found.extend(cluster_resources(estate.clusters, estate.project_id,
                                       project_labels(estate), catalog))
    return found
