"""Live Google Cloud source: projects, Compute Engine instances and disks → `Resource` models.

Reads through the official clients: google-cloud-resource-manager for the projects to scan (all
the credentials can see, unless `--project` names them) and their labels, google-cloud-compute
for instances and disks of every zone and region (one aggregated list per project and kind).
Credentials are Application Default Credentials. The SDKs are imported inside functions only.

What it decides, and why (matching the Terraform adapter, so both doors give one verdict):

- **Ids** are the full resource paths (`projects/P/zones/Z/instances/N`); `kind` is the
  Terraform type (`google_compute_instance`, `google_compute_disk`, `google_compute_region_disk`)
  so advice names the attribute to change.
- **GPUs**: a machine type the catalog knows (a2, a3, g2: GPUs built in) wins; otherwise the
  attached `guestAccelerators`, priced per accelerator.
- **Capacity** is spot when `scheduling.provisioningModel` is SPOT or `scheduling.preemptible`.
- **Tags** are the instance's `labels` (network `tags` are firewall targets, not metadata); the
  project's labels are the fallback for production, like a Kubernetes namespace's labels.
- **Disks** are VOLUME resources, always encrypted by the platform; `customer_key` when a Cloud
  KMS key (CMEK) or a customer-supplied key protects them. A disk carries the labels of the
  instance using it under its own, so an exemption on an instance covers its disks.
- **Partial failures** (one project denied, throttled past the retries) become warnings and the
  scan goes on; when every project fails, the scan fails with the first project's reason.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.catalog import Catalog
from engine.enrich import enrich
from engine.errors import InputError, install_hint
from engine.model import Capacity, Category, GpuSpec, Resource, State
from engine.sources.registry import Collected, ScanOptions
from engine.sources.snapshot import Count, Labels, ObjectShape, check_shape

if TYPE_CHECKING:
    from engine.sources.snapshot import SnapshotContext

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
INSTANCE_KIND = "google_compute_instance"
DISK_KIND = "google_compute_disk"
REGION_DISK_KIND = "google_compute_region_disk"

_RUNNING = frozenset({"PROVISIONING", "STAGING", "RUNNING", "REPAIRING"})
_STOPPED = frozenset({"STOPPING", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED"})
# Aggregated lists carry a warning for every empty zone; these codes are not problems.
_QUIET_WARNINGS = frozenset({"NO_RESULTS_ON_PAGE"})
_REQUEST_PREFIX = re.compile(r"^[A-Z]+ \S+: ")


@dataclass(frozen=True)
class GcpSettings:
    """How to reach the APIs. Tests point the endpoints at a loopback server."""

    credentials: Any = None  # None: Application Default Credentials
    compute_endpoint: str | None = None  # e.g. "http://127.0.0.1:8080"
    resource_manager_endpoint: str | None = None
    max_attempts: int = 5  # per request, for 429 and 503 answers
    max_retry_wait_s: float = 60.0  # longest Retry-After honoured


# The settings `collect` connects with; replace them to point the source elsewhere.
SETTINGS = GcpSettings()


@dataclass
class GcpClients:
    """The API clients of one scan; the remediation executor reuses them."""

    instances: Any  # compute_v1.InstancesClient
    disks: Any  # compute_v1.DisksClient
    projects: Any  # resourcemanager_v3.ProjectsClient
    retry: Any = None  # applied to every call


@dataclass
class ProjectEstate:
    """One project as listed: its Project, Instance and Disk objects as the APIs serve them."""

    project: dict[str, Any]
    instances: list[dict[str, Any]] = field(default_factory=list)
    disks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def project_id(self) -> str:
        return str(self.project.get("projectId") or "")


# ---------------------------------------------------------------------------- connecting


class RetryAfter:
    """A retry decorator for throttling (429) and unavailability (503) answers.

    Waits what the server's Retry-After header asks (capped), else backs off exponentially
    with jitter; gives up after `max_attempts` tries and re-raises the last error.
    """

    def __init__(self, max_attempts: int, max_wait_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.max_attempts = max(1, max_attempts)
        self.max_wait_s = max_wait_s
        self.sleep = sleep

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        from google.api_core.exceptions import ServiceUnavailable, TooManyRequests

        def retried(*args: Any, **kwargs: Any) -> Any:
            for attempt in range(1, self.max_attempts + 1):
                try:
                    return func(*args, **kwargs)
                except (TooManyRequests, ServiceUnavailable) as exc:
                    if attempt == self.max_attempts:
                        raise
                    self.sleep(self._wait(exc, attempt))
            raise AssertionError("unreachable")

        return retried

    def _wait(self, exc: BaseException, attempt: int) -> float:
        response = getattr(exc, "response", None)
        header = response.headers.get("Retry-After") if response is not None else None
        try:
            asked = float(header) if header is not None else None
        except ValueError:
            asked = None  # an HTTP date: fall back to backing off
        if asked is None:
            asked = min(2.0 ** (attempt - 1), 32.0) * (0.5 + random.random() / 2)
        return max(0.0, min(asked, self.max_wait_s))


def connect(settings: GcpSettings | None = None) -> GcpClients:
    """Clients over the REST transport, with Application Default Credentials unless given."""
    settings = settings or SETTINGS
    try:
        from google.cloud import compute_v1, resourcemanager_v3
    except ModuleNotFoundError as exc:
        raise InputError(f"source 'gcp' needs a package that is not installed: {exc.name} "
                         f"({install_hint('gcp')})") from None
    credentials = settings.credentials or _default_credentials()

    def options(endpoint: str | None) -> dict[str, str] | None:
        return {"api_endpoint": endpoint} if endpoint else None

    compute_options = options(settings.compute_endpoint)
    return GcpClients(
        instances=compute_v1.InstancesClient(credentials=credentials, transport="rest",
                                             client_options=compute_options),
        disks=compute_v1.DisksClient(credentials=credentials, transport="rest",
                                     client_options=compute_options),
        projects=resourcemanager_v3.ProjectsClient(
            credentials=credentials, transport="rest",
            client_options=options(settings.resource_manager_endpoint)),
        retry=RetryAfter(settings.max_attempts, settings.max_retry_wait_s),
    )


def _default_credentials() -> Any:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, _ = google.auth.default(scopes=list(SCOPES))
    except DefaultCredentialsError:
        raise InputError("gcp: no Application Default Credentials found (run `gcloud auth "
                         "application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS)"
                         ) from None
    return credentials


# ---------------------------------------------------------------------------- errors


class ProjectFailed(Exception):
    """One project could not be listed; `auth` when the credentials were refused."""

    def __init__(self, message: str, *, auth: bool) -> None:
        super().__init__(message)
        self.auth = auth


def describe_error(exc: BaseException) -> tuple[str, bool]:
    """One line for an API or credentials failure, and whether it is an auth failure."""
    from google.api_core import exceptions as api
    from google.auth.exceptions import GoogleAuthError

    if isinstance(exc, GoogleAuthError):
        return f"credentials rejected or expired: {_first_line(exc)}", True
    if isinstance(exc, api.Unauthorized):
        return f"credentials rejected (HTTP 401): {_api_message(exc)}", True
    if isinstance(exc, api.Forbidden):
        return f"permission denied (HTTP 403): {_api_message(exc)}", True
    if isinstance(exc, api.TooManyRequests):
        return f"throttled (HTTP 429) after retries: {_api_message(exc)}", False
    if isinstance(exc, api.NotFound):
        return f"not found (HTTP 404): {_api_message(exc)}", False
    if isinstance(exc, api.GoogleAPICallError):
        return f"API error (HTTP {exc.code}): {_api_message(exc)}", False
    return f"cannot reach the API: {_first_line(exc)}", False


def _api_message(exc: Any) -> str:
    # the client prefixes the request ("GET https://...: "); the server's message is the news
    text = _first_line(getattr(exc, "message", None) or exc)
    return _REQUEST_PREFIX.sub("", text, count=1) or text


def _first_line(value: object) -> str:
    text = " ".join(str(value).split())
    return text[:300] or "no detail"


# ---------------------------------------------------------------------------- listing


def _plain(message: Any) -> dict[str, Any]:
    """A proto-plus message as the API's JSON object (camelCase keys, enum names)."""
    found: dict[str, Any] = type(message).to_dict(
        message, preserving_proto_field_name=False, use_integers_for_enums=False)
    return found


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
    """Instances and disks of one project, with the warnings of zones that did not answer.

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
    return estate, warnings


def _scope_warning(project: str, scope: str, scoped: Any) -> list[str]:
    if "warning" not in scoped:
        return []
    warning = scoped.warning
    if warning.code in _QUIET_WARNINGS:
        return []
    return [f"gcp: project {project}: {scope}: {warning.code}: {_first_line(warning.message)}"]


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


# ---------------------------------------------------------------------------- normalizing


def last_segment(url: Any) -> str | None:
    """`.../zones/us-central1-a/machineTypes/a2-highgpu-1g` → `a2-highgpu-1g`."""
    return str(url).rstrip("/").rsplit("/", 1)[-1] if url else None


def resource_path(obj: Mapping[str, Any], project: str, collection: str) -> str:
    """`projects/P/zones/Z/instances/N` from the selfLink, else from project, zone and name."""
    link = str(obj.get("selfLink") or "")
    marker = link.find("/projects/")
    if marker >= 0:
        return link[marker + 1:]
    location = obj.get("zone") or obj.get("region")
    scope = "zones" if obj.get("zone") else "regions"
    return f"projects/{project}/{scope}/{last_segment(location)}/{collection}/{obj.get('name')}"


def zone_region(zone: str | None) -> str | None:
    """`us-central1-a` → `us-central1`."""
    if not zone:
        return None
    head, _, tail = zone.rpartition("-")
    return head if head and len(tail) == 1 else zone


def instance_state(status: Any) -> State:
    if status in _RUNNING:
        return State.RUNNING
    if status in _STOPPED:
        return State.STOPPED
    return State.UNKNOWN


def instance_capacity(instance: Mapping[str, Any]) -> Capacity:
    scheduling = instance.get("scheduling") or {}
    spot = str(scheduling.get("provisioningModel") or "").upper() == "SPOT" \
        or scheduling.get("preemptible") is True
    return Capacity.SPOT if spot else Capacity.ON_DEMAND


def attached_gpus(instance: Mapping[str, Any], machine_type: str | None,
                  catalog: Catalog) -> tuple[GpuSpec | None, float | None]:
    """GPU spec and hourly price of the attached accelerators; machine types with GPUs built in
    (a2, a3, g2) are left to the catalog."""
    if catalog.instance(machine_type) is not None:
        return None, None
    total, price, priced = 0, 0.0, True
    model: str | None = None
    memory: float | None = None
    for accelerator in instance.get("guestAccelerators") or []:
        count = int(accelerator.get("acceleratorCount") or 0)
        if count <= 0:
            continue
        total += count
        name = accelerator.get("acceleratorType")
        known = catalog.accelerator(name)
        if known is None or known.usd_hr_per_gpu is None:
            priced = False
        else:
            price += known.usd_hr_per_gpu * count
        if model is None:
            model = known.gpu_model if known else last_segment(name)
            memory = known.gpu_memory_gib if known else None
    if total == 0:
        return None, None
    return GpuSpec(model=model, count=float(total), memory_gib=memory), price if priced else None


def _labels(obj: Mapping[str, Any], key: str = "labels") -> dict[str, str]:
    return {str(k): str(v) for k, v in (obj.get(key) or {}).items()}


def instance_resource(instance: dict[str, Any], estate: ProjectEstate,
                      catalog: Catalog) -> Resource:
    machine_type = last_segment(instance.get("machineType"))
    gpu, price = attached_gpus(instance, machine_type, catalog)
    zone = last_segment(instance.get("zone"))
    resource = Resource(
        provider="gcp",
        kind=INSTANCE_KIND,
        category=Category.INSTANCE,
        id=resource_path(instance, estate.project_id, "instances"),
        name=str(instance.get("name") or ""),
        region=zone_region(zone),
        account=estate.project_id or None,
        tags=_labels(instance),
        namespace_labels=_labels(estate.project),
        instance_type=machine_type,
        gpu=gpu,
        hourly_usd=price,
        capacity=instance_capacity(instance),
        state=instance_state(instance.get("status")),
        raw=instance,
    )
    return enrich(resource, catalog)


def disk_customer_key(disk: Mapping[str, Any]) -> bool:
    """A Cloud KMS key (CMEK) or a customer-supplied key (CSEK, seen as its sha256)."""
    key = disk.get("diskEncryptionKey") or {}
    return bool(key.get("kmsKeyName") or key.get("sha256") or key.get("rsaEncryptedKey"))


def disk_resource(disk: dict[str, Any], estate: ProjectEstate,
                  instance_labels: Mapping[str, dict[str, str]]) -> Resource:
    users = [str(u) for u in disk.get("users") or []]
    inherited: dict[str, str] = {}
    for user in users:
        inherited = {**instance_labels.get(_path_of(user), {}), **inherited}
    regional = not disk.get("zone") and bool(disk.get("region"))
    location = last_segment(disk.get("region")) if regional else \
        zone_region(last_segment(disk.get("zone")))
    return Resource(
        provider="gcp",
        kind=REGION_DISK_KIND if regional else DISK_KIND,
        category=Category.VOLUME,
        id=resource_path(disk, estate.project_id, "disks"),
        name=str(disk.get("name") or ""),
        region=location,
        account=estate.project_id or None,
        tags={**inherited, **_labels(disk)},
        namespace_labels=_labels(estate.project),
        encrypted=True,
        customer_key=disk_customer_key(disk),
        state=State.RUNNING if users else State.STOPPED,
        raw=disk,
    )


def _path_of(link: str) -> str:
    marker = link.find("/projects/")
    return link[marker + 1:] if marker >= 0 else link


def estate_resources(estates: Iterable[ProjectEstate], catalog: Catalog) -> list[Resource]:
    found: list[Resource] = []
    for estate in estates:
        instances = [instance_resource(i, estate, catalog) for i in estate.instances]
        labels = {r.id: r.tags for r in instances}
        found.extend(instances)
        found.extend(disk_resource(d, estate, labels) for d in estate.disks)
    return found


# ---------------------------------------------------------------------------- snapshots


def gcp_snapshot(estates: Iterable[ProjectEstate]) -> dict[str, Any]:
    """The `gcp:` section of a snapshot bundle."""
    return {"projects": [{"project": e.project, "instances": e.instances, "disks": e.disks}
                         for e in estates]}


def read_snapshot_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """Snapshot section `gcp: {projects: [{project, instances, disks}]}`."""
    return estate_resources(_estates_from_section(value, ctx.file), ctx.catalog)


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


class _Project(ObjectShape):
    projectId: str | None = None
    labels: Labels | None = None


_SECTION_SHAPES: dict[str, type[ObjectShape]] = {"instances": _Instance, "disks": _Disk}


def _estates_from_section(value: Any, file: str) -> list[ProjectEstate]:
    if not isinstance(value, Mapping) or not isinstance(value.get("projects"), list):
        raise InputError("gcp must be a mapping with a 'projects' list", file=file)
    estates: list[ProjectEstate] = []
    for index, entry in enumerate(value["projects"]):
        where = f"gcp.projects[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("project"), Mapping):
            raise InputError(f"{where} needs a 'project' mapping", file=file)
        check_shape(_Project, entry["project"], f"{where}.project", file)
        lists = {key: entry.get(key) or [] for key in _SECTION_SHAPES}
        for key, items in lists.items():
            if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
                raise InputError(f"{where}.{key} must be a list of objects", file=file)
            for position, item in enumerate(items):
                check_shape(_SECTION_SHAPES[key], item, f"{where}.{key}[{position}]", file)
        estates.append(ProjectEstate(dict(entry["project"]),
                                     [dict(i) for i in lists["instances"]],
                                     [dict(d) for d in lists["disks"]]))
    return estates


# ---------------------------------------------------------------------------- the source


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source gcp` (or `gcp:PROJECT[,PROJECT]`): the projects named, else all visible."""
    clients = connect()
    wanted = [p.strip() for p in arg.split(",")] if arg else list(options.projects)
    estates, warnings = list_estate(clients, list_projects(clients, wanted), options.max_workers)
    return Collected(
        resources=estate_resources(estates, catalog),
        snapshot={"gcp": gcp_snapshot(estates)},
        clients={"gcp": clients},
        warnings=warnings,
    )
