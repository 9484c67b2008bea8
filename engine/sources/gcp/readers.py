"""Reading a Google Cloud estate: the projects to scan, and the instances and disks of each
(one aggregated list per project and kind, projects concurrently in a bounded pool), as the
APIs serve them (`ProjectEstate`). Partial failures become warnings.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engine.core.errors import InputError
from engine.sources.gcp.clients import GcpClients
from engine.sources.gcp.failures import ProjectFailed, describe_error, first_line
from engine.sources.gcp.gke_readers import list_clusters

# Aggregated lists carry a warning for every empty zone; these codes are not problems.
_QUIET_WARNINGS = frozenset({"NO_RESULTS_ON_PAGE"})


@dataclass
class ProjectEstate:
    """One project as listed: its Project, Instance, Disk and GKE Cluster objects as the APIs
    serve them."""

    project: dict[str, Any]
    instances: list[dict[str, Any]] = field(default_factory=list)
    disks: list[dict[str, Any]] = field(default_factory=list)
    clusters: list[dict[str, Any]] = field(default_factory=list)  # GKE, node pools inline

    @property
    def project_id(self) -> str:
        return str(self.project.get("projectId") or "")


def _plain(message: Any) -> dict[str, Any]:
    """A proto-plus message as the API's JSON object (camelCase keys, enum names)."""
    found: dict[str, Any] = type(message).to_dict(
        message, preserving_proto_field_name=False, use_integers_for_enums=False)
    return found


plain = _plain  # for the machine types read at the runtime door


def list_projects(clients: GcpClients, wanted: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The projects to scan: those named (with their labels when readable), else every active
    project the credentials can see."""
    names = [p for p in wanted if p]
    if names:
        return [_named_project(clients, name) for name in names]
    try:
        pager = clients.projects.search_projects(query="state:ACTIVE", retry=clients.retry)
        return [_plain(project) for project in pager]
    except Exception as exc:
        message, _ = describe_error(exc)
        raise InputError(f"gcp: cannot list projects: {message}") from None


def _named_project(clients: GcpClients, project_id: str) -> dict[str, Any]:
    """The Project object of a named project; just its id when it cannot be read (scanning
    compute needs no Resource Manager permission)."""
    try:
        return _plain(clients.projects.get_project(name=f"projects/{project_id}",
                                                   retry=clients.retry))
    except Exception:
        return {"projectId": project_id}


def list_project(clients: GcpClients, project: dict[str, Any]) -> tuple[ProjectEstate, list[str]]:
    """Instances, disks and GKE clusters of one project, with the warnings of zones that did
    not answer.

    Raises ProjectFailed when the project cannot be listed.
    """
    estate = ProjectEstate(project=project)
    warnings: list[str] = []
    try:
        instances = clients.instances.aggregated_list(project=estate.project_id,
                                                      retry=clients.retry)
        for scope, scoped in instances:
            estate.instances.extend(_plain(item) for item in scoped.instances)
            warnings.extend(_scope_warning(estate.project_id, scope, scoped))
        disks = clients.disks.aggregated_list(project=estate.project_id, retry=clients.retry)
        for scope, scoped in disks:
            estate.disks.extend(_plain(item) for item in scoped.disks)
            warnings.extend(_scope_warning(estate.project_id, scope, scoped))
    except Exception as exc:
        message, auth = describe_error(exc)
        raise ProjectFailed(f"gcp: project {estate.project_id}: {message}; skipped",
                            auth=auth) from exc
    estate.clusters, cluster_warnings = list_clusters(clients, estate.project_id)
    return estate, warnings + cluster_warnings


def _scope_warning(project: str, scope: str, scoped: Any) -> list[str]:
    if "warning" not in scoped:
        return []
    warning = scoped.warning
    if warning.code in _QUIET_WARNINGS:
        return []
    return [f"gcp: project {project}: {scope}: {warning.code}: {first_line(warning.message)}"]


def list_estate(clients: GcpClients, projects: list[dict[str, Any]],
                max_workers: int = 8) -> tuple[list[ProjectEstate], list[str]]:
    """Every project listed (concurrently, in a bounded pool); failures become warnings.

    Raises InputError when there is nothing to scan or every project failed.
    """
    if not projects:
        raise InputError("gcp: no projects visible to these credentials (name them with "
                         "--project)")
    estates: list[ProjectEstate] = []
    warnings: list[str] = []
    failures: list[ProjectFailed] = []
    workers = max(1, min(max_workers, len(projects)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(lambda p: _try_project(clients, p), projects))
    for outcome in outcomes:
        if isinstance(outcome, ProjectFailed):
            failures.append(outcome)
            warnings.append(str(outcome))
        else:
            estate, zone_warnings = outcome
            estates.append(estate)
            warnings.extend(zone_warnings)
    if failures and not estates:
        reason = str(failures[0]).removesuffix("; skipped")
        more = f" (and {len(failures) - 1} more projects)" if len(failures) > 1 else ""
        raise InputError(f"{reason}{more}")
    return estates, warnings


def _try_project(clients: GcpClients,
                 project: dict[str, Any]) -> tuple[ProjectEstate, list[str]] | ProjectFailed:
    try:
        return list_project(clients, project)
    except ProjectFailed as failed:
        return failed
