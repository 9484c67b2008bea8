"""Admission decisions: an AdmissionRequest in, a `Decision` out. Synchronous and pure apart
from reading the cluster cache snapshot, so the app can run it in a worker thread under a deadline.

- validate: `deny` findings refuse the request (403, each policy id with its fix), `warn`
  findings and undecidable (`unknown`) ones become warnings, every finding an audit annotation.
- mutate: failing findings whose remediation has a patch builder (spot placement, MIG swap)
  become one JSONPatch; the mutating webhook never refuses.

Only CREATE and UPDATE are judged. An UPDATE is judged only when it changes what policies read
(the pod template, the workload's labels or annotations) and never for a Pod (its spec was
judged at creation and is immutable); objects being deleted and subresources pass.

Exemptions are recorded in the response's audit annotations (`exemption`): a mirror pod (only a
Pod bound to a node and owned by that Node, as the kubelet creates them: the annotation alone
exempts nothing), a namespace excluded in the settings, a `gpuwarden.io/exempt` label or
annotation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from engine.core.evaluate import Engine
from engine.core.labels import exempt_policies
from engine.core.model import Category, Finding, Resource, State
from engine.rego.gatekeeper import judges_every_kind, object_resource
from engine.rego.inputs import admission_request
from engine.sources.kubernetes import gpu_model, pod_template_path, workload_resource
from engine.webhook.caches import ClusterCache
from engine.webhook.review import AdmissionRequest, Decision, audit_key
from remediations.kubernetes_patch import CLOUDS, Patch, mig_swap_patch, spot_placement_patch
from remediations.planning import plan_remediations

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
EXEMPTION_AUDIT_KEY = "exemption"
MAX_EXEMPTION_CHARS = 256
MigSwap = Literal["offered", "always", "off"]
Endpoint = Literal["validate", "mutate"]


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    # Whose spot label and toleration the mutating webhook writes; None: the cloud the cluster's
    # GPU nodes say (providerID), and no spot patch when they say none.
    cloud: str | None = "aws"
    mig_swap: MigSwap = "offered"  # offered: only when a node advertises the MIG resource
    excluded_namespaces: frozenset[str] = frozenset()  # allowed unjudged, recorded as exempt

    def __post_init__(self) -> None:
        if self.cloud is not None and self.cloud not in CLOUDS:
            raise ValueError(f"cloud must be one of {', '.join(CLOUDS)}, not {self.cloud!r}")
        if self.mig_swap not in ("offered", "always", "off"):
            raise ValueError(f"mig_swap must be offered, always or off, not {self.mig_swap!r}")


@dataclass(slots=True)
class Evaluation:
    findings: list[Finding]
    seconds_by_policy: dict[str, float] = field(default_factory=dict)


class Evaluator(Protocol):
    def __call__(self, resource: Resource, now: datetime) -> Evaluation: ...


class PolicyEvaluator:
    """The engine at the admission door, one policy at a time so each is timed. Policies that
    are `off` at admission or do not apply to workloads are left out once, up front; only Rego
    admission policies that declare the `other` category judge objects that are not workloads
    (Services, Ingresses, Namespaces)."""

    def __init__(self, engine: Engine):
        self.catalog = engine.catalog
        self.engines = [
            (policy.id, Engine([policy], engine.catalog), judges_every_kind(policy))
            for policy in engine.policies
            if policy.enforcement("admission") != "off"
            and (Category.WORKLOAD in policy.categories or judges_every_kind(policy))
        ]
        self.judges_every_kind = any(every_kind for _, _, every_kind in self.engines)

    def __call__(self, resource: Resource, now: datetime) -> Evaluation:
        evaluation = Evaluation(findings=[])
        for policy_id, single, every_kind in self.engines:
            if resource.category is not Category.WORKLOAD and not every_kind:
                continue
            started = time.perf_counter()
            report = plan_remediations(single.assess([resource], now, door="admission"),
                                       single.policies)
            evaluation.seconds_by_policy[policy_id] = time.perf_counter() - started
            evaluation.findings.extend(report.findings)
        return evaluation


@dataclass(slots=True)
class Outcome:
    """A decision plus how it is counted: allow, deny, warn, patch or skip."""

    decision: Decision
    label: str
    evaluation: Evaluation | None = None


PatchBuilder = Callable[["Judge", dict[str, Any], Finding], Patch]
PATCH_BUILDERS: dict[str, PatchBuilder] = {}


def patch_builder(action: str) -> Callable[[PatchBuilder], PatchBuilder]:
    """Register the JSONPatch that carries out a remediation action at admission."""

    def register(builder: PatchBuilder) -> PatchBuilder:
        PATCH_BUILDERS[action] = builder
        return builder

    return register


class Judge:
    def __init__(self, evaluator: Evaluator, caches: ClusterCache, settings: AdmissionSettings,
                 *, help_by_policy: Mapping[str, str], catalog: Any):
        self.evaluator = evaluator
        self.caches = caches
        self.settings = settings
        self.help_by_policy = dict(help_by_policy)
        self.catalog = catalog

    # ------------------------------------------------------------------ entry points

    def decide(self, endpoint: Endpoint, request: AdmissionRequest, now: datetime) -> Outcome:
        return self.validate(request, now) if endpoint == "validate" else self.mutate(request, now)

    def validate(self, request: AdmissionRequest, now: datetime) -> Outcome:
        unjudged = self.unjudged(request)
        if unjudged is not None:
            return unjudged
        prepared = self.prepare(request, mutating=False)
        if prepared is None:
            return Outcome(Decision(), "skip")
        obj, resource = prepared
        evaluation = self.evaluate(request, obj, resource, now)
        decision = self.verdict(resource, evaluation.findings)
        _record_exempt_policies(decision, resource)
        label = "deny" if not decision.allowed else "warn" if decision.warnings else "allow"
        return Outcome(decision, label, evaluation)

    def mutate(self, request: AdmissionRequest, now: datetime) -> Outcome:
        unjudged = self.unjudged(request)
        if unjudged is not None:
            return unjudged
        prepared = self.prepare(request, mutating=True)
        if prepared is None:
            return Outcome(Decision(), "skip")
        obj, resource = prepared
        evaluation = self.evaluate(request, obj, resource, now)
        decision = Decision()
        _record_exempt_policies(decision, resource)
        for finding in evaluation.findings:
            action = finding.remediation.action if finding.remediation else None
            builder = PATCH_BUILDERS.get(action or "")
            if finding.result != "fail" or finding.enforcement not in ("deny", "warn"):
                continue
            ops = builder(self, obj, finding) if builder else []
            if ops:
                decision.patch.extend(ops)
                decision.audit_annotations[audit_key(finding.policy)] = "patched"
        return Outcome(decision, "patch" if decision.patch else "allow", evaluation)

    def evaluate(self, request: AdmissionRequest, obj: dict[str, Any], resource: Resource,
                 now: datetime) -> Evaluation:
        """The policies on `resource`; Rego policies reading the AdmissionReview see this
        request (operation, oldObject, userInfo) with the object as judged."""
        with admission_request({**request.raw, "object": obj}):
            return self.evaluator(resource, now)

    def unjudged(self, request: AdmissionRequest) -> Outcome | None:
        """The outcome of a request that is not evaluated (skipped or exempt), else None."""
        if skip_reason(request) is not None:
            return Outcome(Decision(), "skip")
        exemption = exemption_of(request, self.settings)
        if exemption is not None:
            return Outcome(Decision(audit_annotations={EXEMPTION_AUDIT_KEY: exemption}), "skip")
        return None

    # ------------------------------------------------------------------ normalization

    def prepare(self, request: AdmissionRequest,
                mutating: bool) -> tuple[dict[str, Any], Resource] | None:
        """(object as judged, its workload resource); None when the request is not judged."""
        if self.unjudged(request) is not None:
            return None
        assert request.object is not None
        obj = _with_identity(request.object, request)
        labels = self.caches.namespace_labels(_namespace_of(obj))
        resource = workload_resource(obj, labels, catalog=self.catalog, state=State.PLANNED,
                                     claims=self.caches.claims())
        if resource is None and getattr(self.evaluator, "judges_every_kind", False):
            return obj, object_resource(obj, _namespace_of(obj), labels)
        if resource is None:
            return None
        return obj, self.with_node_gpu_model(resource, obj)

    def with_node_gpu_model(self, resource: Resource, obj: dict[str, Any]) -> Resource:
        """Fill an unpinned GPU model from the nodes the workload can land on, when they all
        have the same one."""
        gpu = resource.gpu
        if gpu is None or gpu.model is not None:
            return resource
        products = self.caches.gpu_products(node_selector(obj))
        if len(products) != 1:
            return resource
        product = products.pop()
        if "-MIG-" in product.upper():  # MIG "single" strategy: nvidia.com/gpu is a slice there
            return resource
        model, memory = gpu_model(product, self.catalog)
        update = {"model": model, "memory_gib": gpu.memory_gib or memory}
        return resource.model_copy(update={"gpu": gpu.model_copy(update=update)})

    # ------------------------------------------------------------------ validate verdict

    def verdict(self, resource: Resource, findings: list[Finding]) -> Decision:
        decision = Decision()
        denying = [f for f in findings if f.result == "fail" and f.enforcement == "deny"]
        for finding in findings:
            decision.audit_annotations[audit_key(finding.policy)] = finding.result
            # An undecidable deny policy is worth a warning; an undecidable warn policy is not.
            warns = (finding.result == "fail" and finding.enforcement == "warn") or (
                finding.result == "unknown" and finding.enforcement == "deny"
            )
            if warns:
                decision.warnings.append(f"[{finding.policy}] {finding.message}")
        if denying:
            decision.allowed = False
            decision.code = 403
            decision.message = self.denial_message(resource, denying)
        return decision

    def denial_message(self, resource: Resource, denying: list[Finding]) -> str:
        parts = []
        for finding in sorted(denying, key=lambda f: f.policy):
            fix = self.help_by_policy.get(finding.policy, "")
            parts.append(f"[{finding.policy}] {finding.message}." + (f" Fix: {fix}" if fix else ""))
        ids = ",".join(sorted({f.policy for f in denying}))
        return (
            f"gpuwarden denied {resource.id}: " + " ".join(parts)
            + f" (to exempt it, annotate gpuwarden.io/exempt: {ids})"
        )


# ---------------------------------------------------------------------------- patch builders


@patch_builder("advise-spot")
def _spot_patch(judge: Judge, obj: dict[str, Any], finding: Finding) -> Patch:
    cloud = judge.settings.cloud or judge.caches.cloud()
    return spot_placement_patch(obj, cloud) if cloud is not None else []


@patch_builder("advise-mig")
def _mig_patch(judge: Judge, obj: dict[str, Any], finding: Finding) -> Patch:
    target = finding.details.get("mig_resource")
    mode = judge.settings.mig_swap
    if not isinstance(target, str) or mode == "off":
        return []
    if mode == "offered" and not judge.caches.offers(target, node_selector(obj)):
        return []  # no node has that slice: the swap would leave the pod Pending
    return mig_swap_patch(obj, target)


# ---------------------------------------------------------------------------- which requests


def skip_reason(request: AdmissionRequest) -> str | None:
    """Why a request is allowed without evaluation; None when it is judged."""
    if request.operation not in ("CREATE", "UPDATE"):
        return f"{request.operation} is not judged"
    if request.sub_resource:
        return f"subresource {request.sub_resource} is not judged"
    obj = request.object
    if obj is None:
        return "no object"
    metadata = _mapping(obj.get("metadata"))
    if metadata.get("deletionTimestamp"):
        return "object is being deleted"
    if request.operation == "UPDATE":
        if _kind_of(obj, request) == "Pod":
            return "pod updates are not judged (the pod was judged at creation)"
        if request.old_object is not None and not _policy_inputs_changed(
            request.old_object, obj, request
        ):
            return "update leaves the pod template, labels and annotations unchanged"
    return None


def exemption_of(request: AdmissionRequest, settings: AdmissionSettings) -> str | None:
    """Why a judged request is exempt from evaluation (an audit annotation value), else None."""
    if request.namespace is not None and request.namespace in settings.excluded_namespaces:
        return f"excluded-namespace:{request.namespace}"
    if request.object is not None and is_mirror_pod(request.object, request):
        return "mirror-pod"  # the kubelet runs static pods whatever the API server says
    return None


def is_mirror_pod(obj: dict[str, Any], request: AdmissionRequest) -> bool:
    """A kubelet's mirror of a static pod: a Pod with the mirror annotation, bound to a node
    (`spec.nodeName`) and owned by that Node. The annotation alone is anyone's to write."""
    metadata = _mapping(obj.get("metadata"))
    if MIRROR_POD_ANNOTATION not in _mapping(metadata.get("annotations")):
        return False
    if request.kind != "Pod" or _kind_of(obj, request) != "Pod":
        return False
    node = _mapping(obj.get("spec")).get("nodeName")
    owners = metadata.get("ownerReferences")
    return isinstance(node, str) and bool(node) and any(
        isinstance(owner, dict) and owner.get("kind") == "Node" and owner.get("name") == node
        for owner in (owners if isinstance(owners, list) else [])
    )


def _record_exempt_policies(decision: Decision, resource: Resource) -> None:
    """Audit a `gpuwarden.io/exempt` label or annotation: which policies it names."""
    ids = exempt_policies(resource) if resource.tags or resource.annotations else frozenset()
    if ids:
        value = "exempt:" + ",".join(sorted(ids))
        if len(value) > MAX_EXEMPTION_CHARS:
            value = value[: MAX_EXEMPTION_CHARS - 3] + "..."
        decision.audit_annotations[EXEMPTION_AUDIT_KEY] = value


def _policy_inputs_changed(old: dict[str, Any], new: dict[str, Any],
                           request: AdmissionRequest) -> bool:
    def inputs(obj: dict[str, Any]) -> tuple[Any, ...]:
        metadata = _mapping(obj.get("metadata"))
        path = pod_template_path(_with_identity(obj, request))
        # A kind without one pod template (a PyTorchJob, a RayCluster): its whole spec, so a
        # controller's metadata-only update (finalizers) is not judged again.
        template: Any = obj if path else obj.get("spec")
        for key in (path or ())[:-1]:
            template = _mapping(template).get(key)
        return metadata.get("labels"), metadata.get("annotations"), template, _replicas(obj)

    return inputs(old) != inputs(new)


def _replicas(obj: dict[str, Any]) -> Any:
    spec = _mapping(obj.get("spec"))
    return spec.get("replicas"), spec.get("parallelism"), spec.get("completions")


def _with_identity(obj: dict[str, Any], request: AdmissionRequest) -> dict[str, Any]:
    """The object with `kind` and `metadata.namespace` filled from the request when absent
    (both are optional in a CREATE body); the caller's dict is not changed."""
    metadata = _mapping(obj.get("metadata"))
    if isinstance(obj.get("kind"), str) and (metadata.get("namespace") or not request.namespace):
        return obj
    copied = dict(obj)
    copied.setdefault("kind", request.kind)
    if not isinstance(copied.get("kind"), str):
        copied["kind"] = request.kind
    if request.namespace and not metadata.get("namespace"):
        copied["metadata"] = {**metadata, "namespace": request.namespace}
    return copied


def _kind_of(obj: dict[str, Any], request: AdmissionRequest) -> str:
    kind = obj.get("kind")
    return kind if isinstance(kind, str) else request.kind


def _namespace_of(obj: dict[str, Any]) -> str | None:
    namespace = _mapping(obj.get("metadata")).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else None


def node_selector(obj: dict[str, Any]) -> dict[str, str]:
    """The pod spec's nodeSelector (string values only)."""
    path = pod_template_path(obj)
    spec: Any = obj
    for key in path or ():
        spec = _mapping(spec).get(key)
    selector = _mapping(_mapping(spec).get("nodeSelector"))
    return {k: v for k, v in selector.items() if isinstance(k, str) and isinstance(v, str)}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
