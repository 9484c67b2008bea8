"""The registry of workload kinds with several pod templates (training operators, Ray, LWS,
JobSet, Volcano, KServe, Spark): one small entry per (API group, kind) saying where its pod
templates live and how many pods each stands for.

To teach gpuwarden a new kind, add one `KindEntry` to `KINDS` with a function that returns its
`PodGroup`s (pod spec, pods): the rest (GPU counts, model, spot, facts) follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.sources.kubernetes.facts import PodGroup
from engine.sources.kubernetes.objects import as_list, as_mapping, count_field, dig

MAX_GROUPS = 64  # pod templates read per object; a real CR has a handful


@dataclass(frozen=True)
class KindEntry:
    group: str  # API group of apiVersion ("" for the core group)
    kind: str
    pod_groups: Callable[[dict[str, Any]], list[PodGroup]]
    training: bool  # interruptible training/batch work (spot patch, checkpoint policy)
    versions: tuple[str, ...]  # served versions a live scan tries, newest first

    @property
    def plural(self) -> str:
        return self.kind.lower() + "s"


def api_group(obj: dict[str, Any]) -> str:
    version = obj.get("apiVersion")
    return version.rsplit("/", 1)[0] if isinstance(version, str) and "/" in version else ""


def kind_entry(obj: dict[str, Any]) -> KindEntry | None:
    """The registered entry of an object's (API group, kind); an object without apiVersion (a
    hand-written test object) matches a kind whose name no other group uses."""
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    if "apiVersion" not in obj:
        return _BY_UNIQUE_NAME.get(kind)
    return KINDS.get((api_group(obj), kind))


# ---------------------------------------------------------------------------- building blocks


def _count(spec: dict[str, Any], *keys: str, default: int = 1) -> tuple[int, bool]:
    """The first present count field among `keys`, else `default`; whether it was readable."""
    known = True
    for key in keys:
        value, readable = count_field(spec, key)
        known = known and readable
        if value is not None:
            return value, known
    return default, known


Path = tuple[str | int, ...]


def _template_group(template: Any, pods: int, known: bool, path: Path) -> PodGroup | None:
    """A group from the `{metadata, spec}` pod template at `path`."""
    template = as_mapping(template)
    return _spec_group(as_mapping(template.get("metadata")), template.get("spec"), pods, known,
                       (*path, "spec"))


def _spec_group(metadata: dict[str, Any], spec: Any, pods: int, known: bool,
                path: Path | None) -> PodGroup | None:
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
        return None
    return PodGroup(metadata, spec, pods, known, path)


def _kept(groups: Iterator[PodGroup | None]) -> list[PodGroup]:
    found: list[PodGroup] = []
    for group in groups:
        if group is not None:
            found.append(group)
        if len(found) >= MAX_GROUPS:
            break
    return found


# ---------------------------------------------------------------------------- Kubeflow


def _replica_specs(field: str) -> Callable[[dict[str, Any]], list[PodGroup]]:
    """Kubeflow training-operator jobs: `spec.<field>` maps a role to {replicas, template}."""
    def groups(obj: dict[str, Any]) -> list[PodGroup]:
        specs = as_mapping(dig(obj, ("spec", field)))
        return _kept(_template_group(as_mapping(s).get("template"),
                                     *_count(as_mapping(s), "replicas"),
                                     ("spec", field, role, "template"))
                     for role, s in specs.items() if isinstance(role, str))
    return groups


def _train_job(obj: dict[str, Any]) -> list[PodGroup]:
    """Kubeflow Trainer TrainJob: `trainer.resourcesPerNode` on each of `trainer.numNodes`."""
    trainer = as_mapping(dig(obj, ("spec", "trainer")))
    resources = trainer.get("resourcesPerNode")
    if not isinstance(resources, dict):
        return []
    nodes, known = _count(trainer, "numNodes")
    spec = {"containers": [{"name": "node", "resources": resources}]}
    return [PodGroup({}, spec, nodes, known)]


# ---------------------------------------------------------------------------- Ray


def _ray_cluster_groups(cluster: dict[str, Any], at: tuple[str, ...]) -> list[PodGroup]:
    """The head (one pod) and each worker group (replicas, else minReplicas) × numOfHosts."""
    head = as_mapping(cluster.get("headGroupSpec"))

    def workers() -> Iterator[PodGroup | None]:
        yield _template_group(head.get("template"), 1, True, (*at, "headGroupSpec", "template"))
        for index, worker in enumerate(as_list(cluster.get("workerGroupSpecs"))):
            worker = as_mapping(worker)
            pods, known = _count(worker, "replicas", "minReplicas")
            hosts, hosts_known = _count(worker, "numOfHosts")
            yield _template_group(worker.get("template"), pods * hosts, known and hosts_known,
                                  (*at, "workerGroupSpecs", index, "template"))
    return _kept(workers())


def _ray_at(*path: str) -> Callable[[dict[str, Any]], list[PodGroup]]:
    return lambda obj: _ray_cluster_groups(as_mapping(dig(obj, path)), path)


# ---------------------------------------------------------------------------- LWS, JobSet, Volcano


def _leader_worker_set(obj: dict[str, Any]) -> list[PodGroup]:
    """replicas groups of `size` pods: one leader (leaderTemplate, else workerTemplate) and
    size-1 workers."""
    spec = as_mapping(obj.get("spec"))
    groups_count, known = _count(spec, "replicas")
    template = as_mapping(spec.get("leaderWorkerTemplate"))
    size, size_known = _count(template, "size")
    known = known and size_known
    leader = template.get("leaderTemplate") or template.get("workerTemplate")
    at = ("spec", "leaderWorkerTemplate")
    leader_at = (*at, "leaderTemplate" if template.get("leaderTemplate") else "workerTemplate")
    return _kept(iter([
        _template_group(leader, groups_count if size else 0, known, leader_at),
        _template_group(template.get("workerTemplate"), groups_count * max(size - 1, 0), known,
                        (*at, "workerTemplate")),
    ]))


def _job_pods(job_spec: dict[str, Any]) -> tuple[int, bool]:
    """Pods a batch/v1 Job spec runs at once: parallelism, never more than completions."""
    parallelism, known = _count(job_spec, "parallelism")
    completions, completions_known = count_field(job_spec, "completions")
    if completions is not None:
        parallelism = min(parallelism, completions)
    return parallelism, known and completions_known


def _job_set(obj: dict[str, Any]) -> list[PodGroup]:
    def jobs() -> Iterator[PodGroup | None]:
        for index, replicated in enumerate(as_list(dig(obj, ("spec", "replicatedJobs")))):
            replicated = as_mapping(replicated)
            replicas, known = _count(replicated, "replicas")
            job_spec = as_mapping(dig(replicated, ("template", "spec")))
            pods, pods_known = _job_pods(job_spec)
            yield _template_group(job_spec.get("template"), replicas * pods, known and pods_known,
                                  ("spec", "replicatedJobs", index, "template", "spec",
                                   "template"))
    return _kept(jobs())


def _volcano_job(obj: dict[str, Any]) -> list[PodGroup]:
    return _kept(_template_group(as_mapping(t).get("template"), *_count(as_mapping(t), "replicas"),
                                 ("spec", "tasks", i, "template"))
                 for i, t in enumerate(as_list(dig(obj, ("spec", "tasks")))))


# ---------------------------------------------------------------------------- KServe


_KSERVE_COMPONENTS = ("predictor", "transformer", "explainer")


def _kserve_pod_spec(component: dict[str, Any]) -> dict[str, Any] | None:
    """A component is a pod spec whose framework block (`model`, `pytorch`, ...) is one more
    container: any mapping in it that has `resources`."""
    containers = [c for c in as_list(component.get("containers")) if isinstance(c, dict)]
    containers += [value for value in component.values()
                   if isinstance(value, dict) and isinstance(value.get("resources"), dict)]
    if not containers:
        return None
    return {**component, "containers": containers}


def _inference_service(obj: dict[str, Any]) -> list[PodGroup]:
    spec = as_mapping(obj.get("spec"))

    def components() -> Iterator[PodGroup | None]:
        for name in _KSERVE_COMPONENTS:
            component = as_mapping(spec.get(name))
            pods, known = _count(component, "minReplicas")
            yield _spec_group({}, _kserve_pod_spec(component), max(pods, 1), known,
                              ("spec", name))
    return _kept(components())


def _llm_inference_service(obj: dict[str, Any]) -> list[PodGroup]:
    """`template` × replicas, `worker` beside each, and the prefill pool's own."""
    spec = as_mapping(obj.get("spec"))
    prefill = as_mapping(spec.get("prefill"))
    replicas, known = _count(spec, "replicas")
    prefill_replicas, prefill_known = _count(prefill, "replicas")
    return _kept(iter([
        _spec_group({}, spec.get("template"), replicas, known, ("spec", "template")),
        _spec_group({}, spec.get("worker"), replicas, known, ("spec", "worker")),
        _spec_group({}, prefill.get("template"), prefill_replicas, prefill_known,
                    ("spec", "prefill", "template")),
        _spec_group({}, prefill.get("worker"), prefill_replicas, prefill_known,
                    ("spec", "prefill", "worker")),
    ]))


# ---------------------------------------------------------------------------- Spark


def _spark_pod(role: dict[str, Any]) -> dict[str, Any]:
    """A Spark Operator driver/executor as a pod spec: its `gpu: {name, quantity}` block as a
    limit, its node selector and affinity as they are."""
    gpu = as_mapping(role.get("gpu"))
    limits = {gpu["name"]: gpu.get("quantity", 1)} if isinstance(gpu.get("name"), str) else {}
    spec: dict[str, Any] = {"containers": [{"name": "spark", "resources": {"limits": limits}}]}
    for key in ("nodeSelector", "affinity", "tolerations", "volumeMounts"):
        if key in role:
            spec[key] = role[key]
    return spec


def _spark_application(obj: dict[str, Any]) -> list[PodGroup]:
    spec = as_mapping(obj.get("spec"))
    driver, executor = as_mapping(spec.get("driver")), as_mapping(spec.get("executor"))
    executors, known = _count(executor, "instances")
    # The driver and executor blocks take nodeSelector and tolerations as a pod spec does.
    return [PodGroup({"labels": as_mapping(driver.get("labels"))}, _spark_pod(driver), 1, True,
                     ("spec", "driver")),
            PodGroup({"labels": as_mapping(executor.get("labels"))}, _spark_pod(executor),
                     executors, known, ("spec", "executor"))]


# ---------------------------------------------------------------------------- the registry


def _entries() -> Iterator[KindEntry]:
    kubeflow = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs",
                "MPIJob": "mpiReplicaSpecs", "PaddleJob": "paddleReplicaSpecs",
                "XGBoostJob": "xgbReplicaSpecs", "JAXJob": "jaxReplicaSpecs",
                "MXJob": "mxReplicaSpecs"}
    for kind, field in kubeflow.items():
        # The MPI operator serves mpijobs as v2beta1, the Kubeflow training operator as v1.
        versions = ("v2beta1", "v1") if kind == "MPIJob" else ("v1",)
        yield KindEntry("kubeflow.org", kind, _replica_specs(field), True, versions)
    yield KindEntry("trainer.kubeflow.org", "TrainJob", _train_job, True, ("v1alpha1",))
    yield KindEntry("ray.io", "RayCluster", _ray_at("spec"), True, ("v1",))
    yield KindEntry("ray.io", "RayJob", _ray_at("spec", "rayClusterSpec"), True, ("v1",))
    yield KindEntry("ray.io", "RayService", _ray_at("spec", "rayClusterConfig"), False, ("v1",))
    yield KindEntry("leaderworkerset.x-k8s.io", "LeaderWorkerSet", _leader_worker_set, False,
                    ("v1",))
    yield KindEntry("jobset.x-k8s.io", "JobSet", _job_set, True, ("v1alpha2",))
    yield KindEntry("batch.volcano.sh", "Job", _volcano_job, True, ("v1alpha1",))
    yield KindEntry("serving.kserve.io", "InferenceService", _inference_service, False,
                    ("v1beta1",))
    yield KindEntry("serving.kserve.io", "LLMInferenceService", _llm_inference_service, False,
                    ("v1alpha2", "v1alpha1"))
    yield KindEntry("sparkoperator.k8s.io", "SparkApplication", _spark_application, True,
                    ("v1beta2",))


KINDS: dict[tuple[str, str], KindEntry] = {(e.group, e.kind): e for e in _entries()}
MULTI_TEMPLATE_KINDS = frozenset(kind for _, kind in KINDS)
_BY_UNIQUE_NAME = {e.kind: e for e in KINDS.values() if e.kind != "Job"}
TRAINING_KINDS = frozenset(e.kind for e in KINDS.values() if e.training)
