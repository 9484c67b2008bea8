"""The normalized resource model and the report contract.

Every source adapter produces `Resource` objects; the engine never sees a provider's own field
names. `Finding` and `Report` are the versioned JSON contract (`gpuwarden.report/v1`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

REPORT_SCHEMA = "gpuwarden.report/v1"
Model = TypeVar("Model", bound=BaseModel)
_EVERY_FIELD: dict[type[BaseModel], set[str]] = {}  # per model class (`trusted`)


class Category(StrEnum):
    """What a resource is, whichever provider it came from; policies select on this."""

    INSTANCE = "instance"  # EC2 instance, GCE instance, Azure VM, spot request
    LAUNCH_TEMPLATE = "launch_template"
    AUTOSCALING_GROUP = "autoscaling_group"
    NODE_GROUP = "node_group"  # EKS node group, GKE node pool, AKS agent pool
    TRAINING_JOB = "training_job"  # SageMaker training job
    NOTEBOOK = "notebook"
    ENDPOINT = "endpoint"
    WORKLOAD = "workload"  # Kubernetes Pod or controller with a pod template
    VOLUME = "volume"  # block volumes and instance disks
    BUCKET = "bucket"  # object storage
    OTHER = "other"


class Capacity(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    # Prepaid or reserved: a capacity reservation or block, a specific reservation, DWS
    # flex-start, a capacity reservation group. Priced as on-demand; spot is not asked of it.
    RESERVED = "reserved"
    UNKNOWN = "unknown"


class State(StrEnum):
    PLANNED = "planned"
    RUNNING = "running"
    STOPPED = "stopped"
    UNKNOWN = "unknown"


class Severity(StrEnum):
    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {
    Severity.INFO: 0,
    Severity.LOW: 1,
    Severity.MEDIUM: 2,
    Severity.HIGH: 3,
    Severity.CRITICAL: 4,
}

Door = Literal["plan", "admission", "runtime"]
Enforcement = Literal["deny", "warn", "audit", "off"]


class GpuSpec(BaseModel):
    """GPUs a resource holds (per instance / per replica)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None  # catalog name, e.g. "NVIDIA A100 80GB SXM"
    count: float | None = None  # whole GPUs; None when not known
    memory_gib: float | None = None  # memory per GPU
    mig_profile: str | None = None  # e.g. "1g.10gb" when the resource holds MIG slices
    mig_count: int = 0
    declared_memory_gib: float | None = None  # gpuwarden.io/gpu-memory annotation
    observed_peak_memory_gib: float | None = None  # from telemetry


class Telemetry(BaseModel):
    """GPU activity over a look-back window, joined to a resource."""

    model_config = ConfigDict(extra="forbid")

    average_activity_pct: float | None = None  # 0-100 compute activity
    metric: str | None = None  # which metric the average came from
    samples: int = 0
    window_seconds: int = 3600
    peak_memory_gib: float | None = None
    reason: str | None = None  # why there is no average (an outage, NaN or stale samples)


class WorkloadSpec(BaseModel):
    """Kubernetes facts of a workload (or of a namespace, for namespace-level policies).

    Values of a controller with several pod templates (a PyTorchJob's master and workers) are
    those of its GPU pod templates when they agree, else None.
    """

    model_config = ConfigDict(extra="forbid")

    runtime_class_name: str | None = None
    scheduler_name: str | None = None
    queue_name: str | None = None  # the Kueue label kueue.x-k8s.io/queue-name
    checkpoint: str | None = None  # the gpuwarden.io/checkpoint annotation
    volume_mount_paths: list[str] = Field(default_factory=list)  # of persistent (PVC) volumes
    shared_gpu: bool | None = False  # time-sliced / shared GPU; None when it cannot be known
    node_name: str | None = None  # the node a running pod is on
    namespace_network_policies: int | None = None  # None when NetworkPolicies were not listed


class MemberSpend(BaseModel):
    """One of a team group's largest members and its monthly run-rate."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    monthly_usd: float


class GroupSpend(BaseModel):
    """A team group's GPU run-rate (the `team-budget` aggregate): at runtime the projected
    run-rate of its running resources; in a plan, before and after the change."""

    model_config = ConfigDict(extra="forbid")

    monthly_usd: float = 0.0  # projected (runtime) or planned (plan) run-rate
    net_usd: float = 0.0  # what the change adds less what it removes (runtime: the run-rate)
    previous_usd: float | None = None  # plan only: the run-rate before the change
    added_usd: float | None = None  # plan only
    removed_usd: float | None = None  # plan only
    unpriced: int = 0  # members whose price is not known
    top_resources: list[MemberSpend] = Field(default_factory=list)


class GroupFacts(BaseModel):
    """What an aggregator sums up about the synthetic group resource it makes
    (`team/<name>`, `Namespace/<name>`); None on every other resource."""

    model_config = ConfigDict(extra="forbid")

    door: Door  # the door whose members the group was made of
    members: list[str] = Field(default_factory=list)  # namespace groups: member workload ids
    spend: GroupSpend | None = None  # team groups


class SourceLocation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    line: int | None = None
    # For a resource inside a module: `file`/`line` are the module call in the caller's file
    # and this is the resource block in the module (SARIF's related location). Not in the JSON
    # when None.
    definition: SourceLocation | None = None

    @model_serializer(mode="wrap")
    def _without_empty_definition(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if self.definition is None and isinstance(data, dict):
            data.pop("definition", None)
        return data


class Resource(BaseModel):
    """One normalized resource, whatever door it came through.

    `unknown` lists the normalized field paths whose value is not known yet (a plan's
    `after_unknown`): conditions over them evaluate to unknown, never to pass or fail.
    """

    model_config = ConfigDict(extra="forbid")

    provider: str  # aws | gcp | azure | kubernetes
    kind: str  # the native type: aws_instance, Deployment, ...
    category: Category
    id: str
    name: str
    region: str | None = None
    account: str | None = None
    cluster: str | None = None
    namespace: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    # The cloud tags/labels billing sees, where `tags` holds more (a node group's tags include
    # the Kubernetes node labels it gives its nodes, which billing never sees); None: `tags`.
    billing_tags: dict[str, str] | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    namespace_labels: dict[str, str] = Field(default_factory=dict)
    instance_type: str | None = None
    count: int = 1  # instances / replicas / desired size this resource stands for
    count_basis: str | None = None  # why `count` is not the configured size ("min size: ...")
    # The ids of the instances a group stands for (an autoscaling group's, a node group's), as
    # read live; they are not scanned resources of their own. Not in the JSON when empty.
    members: tuple[str, ...] = Field(default=(), exclude_if=lambda value: not value)
    gpu: GpuSpec | None = None
    capacity: Capacity = Capacity.UNKNOWN
    encrypted: bool | None = None
    customer_key: bool | None = None
    state: State = State.UNKNOWN
    owner: str | None = None
    hourly_usd: float | None = None  # on-demand list price of one instance/replica
    spot_hourly_usd: float | None = None  # the spot market's price of one, where read live
    telemetry: Telemetry | None = None
    workload: WorkloadSpec | None = None  # Kubernetes workload facts
    checkpoint_uri: str | None = None  # where a training job checkpoints (SageMaker S3Uri)
    unknown: frozenset[str] = frozenset()
    location: SourceLocation | None = None
    # Synthetic groups only; not part of a resource's JSON (Rego input), groups never reach it.
    group: GroupFacts | None = Field(default=None, exclude=True)
    raw: dict[str, Any] = Field(default_factory=dict, repr=False)

    @property
    def has_gpu(self) -> bool:
        return self.gpu is not None and (self.gpu.count or 0) + self.gpu.mig_count > 0

    def is_unknown(self, path: str) -> bool:
        """True when `path` or any parent of it is marked unknown."""
        if not self.unknown:
            return False
        parts = path.split(".")
        return any(".".join(parts[:i]) in self.unknown for i in range(1, len(parts) + 1))


class ResourceRef(BaseModel):
    """How a finding names its resource in the JSON report."""

    provider: str
    kind: str
    id: str
    name: str
    region: str | None = None
    # The AWS account, GCP project or Azure subscription; not in the JSON when unknown (plans,
    # manifests), so reports without one are unchanged.
    account: str | None = Field(default=None, exclude_if=lambda value: value is None)
    namespace: str | None = None

    @classmethod
    def of(cls, resource: Resource) -> ResourceRef:
        return cls(
            provider=resource.provider,
            kind=resource.kind,
            id=resource.id,
            name=resource.name,
            region=resource.region,
            account=resource.account,
            namespace=resource.namespace,
        )


class Remediation(BaseModel):
    action: str
    status: Literal["planned", "applied", "skipped", "failed"] = "planned"
    detail: str = ""


class Finding(BaseModel):
    policy: str
    title: str = ""
    severity: Severity
    result: Literal["fail", "unknown", "pass"]
    resource: ResourceRef
    message: str
    enforcement: Enforcement
    estimated_monthly_usd: float = 0.0  # the finding's figure, in its own cost_kind
    # What kind of money the figure is: savings (a fix saves it), unallocated (spend with no
    # owner), over_budget (a team's run-rate above its budget) or none (no total adds it).
    cost_kind: Literal["savings", "unallocated", "over_budget", "none"] = "none"
    cost_basis: str = ""  # how the dollar figure was estimated
    remediation: Remediation | None = None
    location: SourceLocation | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class Summary(BaseModel):
    resources: int = 0
    findings: int = 0
    failed: int = 0
    unknown: int = 0
    passed: int = 0
    exempted: int = 0
    baselined: int = 0
    by_policy: dict[str, int] = Field(default_factory=dict)
    by_severity: dict[str, int] = Field(default_factory=dict)
    # Failing and unknown findings per account / project / subscription; not in the JSON when
    # no finding names one.
    by_account: dict[str, int] = Field(default_factory=dict, exclude_if=lambda value: not value)
    estimated_monthly_usd: float = 0.0  # equals savings_usd
    monthly_spend_usd: float = 0.0  # scanned GPU spend as it runs, each resource once
    savings_usd: float = 0.0  # per resource, savings combined as rates, at most its spend
    unallocated_usd: float = 0.0  # spend with no owner (tag policies), each resource once
    over_budget_usd: float = 0.0  # run-rate above the teams' budgets


ChangeAction = Literal["create", "update", "replace", "delete"]
PlanAction = ChangeAction | Literal["no-op"]


class ResourceCostChange(BaseModel):
    """One GPU resource of a plan and its monthly run-rate before and after the change."""

    id: str
    action: ChangeAction
    before_monthly_usd: float | None = None  # None: not there before, or not priced
    after_monthly_usd: float | None = None


class TeamCostChange(BaseModel):
    """A team's GPU run-rate in a plan: before, after, what the change adds and removes."""

    team: str | None  # None: resources without a team tag
    previous_monthly_usd: float = 0.0
    planned_monthly_usd: float = 0.0
    added_monthly_usd: float = 0.0
    removed_monthly_usd: float = 0.0
    net_monthly_usd: float = 0.0
    budget_monthly_usd: float | None = None
    unpriced: int = 0  # changed GPU resources whose price is not known
    resources: list[ResourceCostChange] = Field(default_factory=list)


class CostDiff(BaseModel):
    """The PR check's per-team GPU cost diff (Infracost-style), from the team budget policy."""

    policy: str
    basis: str
    teams: list[TeamCostChange] = Field(default_factory=list)
    added_monthly_usd: float = 0.0
    removed_monthly_usd: float = 0.0
    net_monthly_usd: float = 0.0


class CostChange(BaseModel):
    """One change of a plan with its normalized resources before and after it: the input of
    the cost diff (the Terraform adapter makes them: `plan_cost_changes`). Policies never see
    these resources."""

    model_config = ConfigDict(frozen=True)

    address: str
    action: PlanAction
    before: tuple[Resource, ...] = ()
    after: tuple[Resource, ...] = ()


class Prices(BaseModel):
    """Which prices a report's figures used."""

    source: str
    as_of: str | None = None  # YYYY-MM-DD of the prices, when known
    currency: str = "USD"
    override_file: str | None = None  # the --prices file, if one was given


class Report(BaseModel):
    schema_: str = Field(default=REPORT_SCHEMA, alias="schema")
    generated_at: datetime
    mode: Literal["dry-run", "enforce"] = "dry-run"
    findings: list[Finding] = Field(default_factory=list)
    summary: Summary = Field(default_factory=Summary)
    cost_diff: CostDiff | None = None  # only when a plan changes GPU spend
    prices: Prices | None = None  # the prices the figures used

    model_config = ConfigDict(populate_by_name=True)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=False)


def trusted(cls: type[Model], **values: Any) -> Model:
    """`trusted_of` with the values as keywords."""
    return trusted_of(cls, values)


# BaseModel's slots, set through their descriptors (no attribute lookup by name per model)
_set_dict, _set_fields_set, _set_extra, _set_private = (
    vars(BaseModel)[slot].__set__ for slot in (
        "__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"))


def trusted_of(cls: type[Model], values: dict[str, Any]) -> Model:
    """A model of values the engine made itself, each of its field's type, from a dict made
    for it (kept, not copied): pydantic's validation skipped, which was a fifth of building a
    finding. Never for what comes from outside (files, APIs, policies): that is validated. With
    every field given, its set of given fields is the class's one shared set (nothing reads it;
    pydantic only adds assigned names, all in it already): a finding's own set was a third of
    its memory."""
    model = trusted_whole(cls, values)
    if values.keys() != _every_field(cls):
        _set_fields_set(model, set(values))
    return model


def trusted_whole(cls: type[Model], values: dict[str, Any]) -> Model:
    """`trusted_of` for a dict that names every field, as a literal naming them all does: its
    keys are not compared with the fields (`set.issuperset` of a dict copies its keys into a
    new set, per model). A field left out fails at its first read, and the tests compare the
    engine's findings and references with their validated models (test_engine_steps.py)."""
    model = cls.__new__(cls)
    _set_dict(model, values)
    _set_fields_set(model, _EVERY_FIELD.get(cls) or _every_field(cls))
    _set_extra(model, None)
    _set_private(model, None)
    return model


def _every_field(cls: type[BaseModel]) -> set[str]:
    every = _EVERY_FIELD.get(cls)
    if every is None:
        every = _EVERY_FIELD[cls] = set(cls.model_fields)
    return every
