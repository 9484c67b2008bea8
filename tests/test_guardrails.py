"""The guardrail policies (policies/guardrails.yaml): pass, fail and unknown at each door they
apply to, on inputs shaped like the real APIs.

- admission: AdmissionReview v1 bodies posted to the webhook app (in process), with namespace
  labels and nodes served by its cluster cache;
- runtime: Kubernetes API objects through the cluster adapter (and, for NetworkPolicies and the
  training-operator CRDs, the official client against a loopback API server), snapshot bundles
  with normalized resources and telemetry;
- plan: `terraform show -json` documents through `gpuwarden check-plan`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.budget import inline_budgets, run_rate, team_of
from engine.core.catalog import HOURS_PER_MONTH, builtin_catalog
from engine.core.errors import InputError
from engine.core.evaluate import Engine
from engine.core.model import Capacity, Finding, Report, Resource, Severity, State
from engine.loading.budget_files import read_budgets_file
from engine.loading.policies import load_policies
from engine.outputs import RenderContext
from engine.outputs.markdown import render as render_markdown
from engine.sources.kubernetes import load_manifests, workload_resource
from engine.sources.kubernetes.cluster import ClusterState, cluster_resources, kubernetes_snapshot
from engine.sources.snapshot import SnapshotContext, snapshot_resources
from engine.sources.terraform import plan_cost_changes, plan_resources
from engine.webhook.app import create_app
from engine.webhook.caches import ClusterCache, StaticLister
from tests.conftest import BUSINESS_HOURS, REPO, run_cli

FIXTURES = REPO / "tests" / "fixtures" / "guardrails"
DEMO_FIXTURE = REPO / "tests" / "fixtures" / "guardrails-demo.yaml"
TAGS = {"team": "research", "project": "llm", "cost-center": "cc-4711"}
SPOT = {"karpenter.sh/capacity-type": "spot"}
CHECKPOINTED = {"gpuwarden.io/checkpoint": "s3://acme-ml/ckpt/"}
A100 = "NVIDIA-A100-SXM4-80GB"

NAMESPACES: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace",
     "metadata": {"name": "batch", "labels": {"gpuwarden.io/queue-required": "true"}}},
    {"apiVersion": "v1", "kind": "Namespace",
     "metadata": {"name": "tenant-a", "labels": {"gpuwarden.io/tenant": "untrusted"}}},
    {"apiVersion": "v1", "kind": "Namespace",
     "metadata": {"name": "research", "labels": {"env": "dev"}}},
]
NODES: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "a100-spot-1", "labels": {"nvidia.com/gpu.product": A100, **SPOT}},
     "status": {"allocatable": {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "7"}}},
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "t4-shared-1", "labels": {
         "nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4", **SPOT}},
     "status": {"allocatable": {"nvidia.com/gpu": "4"}}},
]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(load_policies(["builtin"]))


# ---------------------------------------------------------------------------- object builders


def workload(kind: str = "Job", *, name: str = "trainer", namespace: str = "research",
             labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             gpus: Any = 1, resource: str = "nvidia.com/gpu", **pod: Any) -> dict[str, Any]:
    """A Pod, Job, CronJob or Deployment requesting `gpus` of `resource`, as kubectl sends it."""
    spec: dict[str, Any] = {"containers": [{
        "name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
        "resources": {"limits": {resource: gpus}}}], **pod}
    metadata = {"name": name, "namespace": namespace, "labels": {**TAGS, **(labels or {})},
                "annotations": dict(annotations or {})}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    template = {"metadata": {"labels": {"app": name}}, "spec": {**spec, "restartPolicy": "Never"}}
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": metadata,
                "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"template": template}}}}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
                "spec": {"template": template}}
    template["spec"].pop("restartPolicy")
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata,
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": template}}


def training_jobs() -> dict[str, dict[str, Any]]:
    path = FIXTURES / "training-jobs.yaml"
    return {obj["kind"]: obj for obj in load_manifests(path.read_text(), str(path))}


# ---------------------------------------------------------------------------- doors


def review(obj: dict[str, Any], *, operation: str = "CREATE") -> dict[str, Any]:
    """An AdmissionReview v1 as the API server posts it."""
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = obj["kind"].lower() + "s"
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": version, "kind": obj["kind"]},
        "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
        "operation": operation,
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }}


def admit(engine: Engine, obj: dict[str, Any], *, endpoint: str = "validate") -> dict[str, Any]:
    """The webhook app's answer to an AdmissionReview of `obj` (in process, no sockets)."""
    cache = ClusterCache(StaticLister([copy.deepcopy(n) for n in NAMESPACES], NODES))
    cache.refresh()
    app = create_app(engine, caches=cache, clock=lambda: BUSINESS_HOURS)

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://webhook") as client:
            return await client.post(f"/{endpoint}", json=review(obj))

    reply = asyncio.run(post())
    assert reply.status_code == 200, reply.text
    response: dict[str, Any] = reply.json()["response"]
    return response


def admission_verdict(engine: Engine, obj: dict[str, Any], policy: str) -> str | None:
    """fail / unknown / pass of `policy` for `obj` at the admission door, from the webhook's
    answer: its audit annotation for fail and unknown; pass when the engine, asked directly
    with passes shown, says so (the webhook does not annotate passes); None: not applicable."""
    response = admit(engine, obj)
    annotated: str | None = response.get("auditAnnotations", {}).get(policy)
    if annotated is not None:
        return annotated
    labels = {ns["metadata"]["name"]: ns["metadata"]["labels"] for ns in NAMESPACES}
    resource = workload_resource(obj, labels.get(obj["metadata"]["namespace"], {}),
                                 state=State.PLANNED)
    assert resource is not None
    report = engine.evaluate([resource], BUSINESS_HOURS, door="admission", show_passed=True)
    direct = {f.policy: f.result for f in report.findings}
    assert direct.get(policy) in (None, "pass"), "the webhook and the engine disagree"
    return direct.get(policy)


def denied_by(response: dict[str, Any], policy: str) -> bool:
    return not response["allowed"] and f"[{policy}]" in response["status"]["message"]


def warned_by(response: dict[str, Any], policy: str) -> bool:
    return any(w.startswith(f"[{policy}]") for w in response.get("warnings", []))


def scan(engine: Engine, objects: list[dict[str, Any]], *,
         network_policies: list[dict[str, Any]] | None = None,
         nodes: list[dict[str, Any]] | None = None) -> Report:
    state = ClusterState(cluster="lab", namespaces=copy.deepcopy(NAMESPACES),
                         nodes=copy.deepcopy(NODES if nodes is None else nodes),
                         workloads=copy.deepcopy(objects), network_policies=network_policies)
    return engine.evaluate(cluster_resources(state), BUSINESS_HOURS, show_passed=True)


def findings_of(report: Report, policy: str) -> dict[str, Finding]:
    return {f.resource.id: f for f in report.findings if f.policy == policy}


def check_plan(plan: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
               *policies: str, fmt: str = "json") -> tuple[int, str]:
    args = ["check-plan", str(plan), "--format", fmt, "--now", BUSINESS_HOURS.isoformat(),
            "--show-passed", "--policies", "builtin"]
    for path in policies:
        args += ["--policies", path]
    code, out, err = run_cli(args, capsys, monkeypatch)
    assert code in (0, 1), err
    return code, out


def plan_findings(out: str, policy: str) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"]: f for f in json.loads(out)["findings"] if f["policy"] == policy}


def overrides(tmp_path: Path, policy: str, **parameters: Any) -> str:
    path = tmp_path / f"{policy}-overrides.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "gpuwarden.io/v1",
                                    "overrides": {policy: {"parameters": parameters}}}))
    return str(path)


# ---------------------------------------------------------------------------- adapter facts


def test_training_operator_jobs_sum_gpus_over_replica_specs() -> None:
    jobs = {kind: workload_resource(obj) for kind, obj in training_jobs().items()}
    pytorch, mpi, ray = jobs["PyTorchJob"], jobs["MPIJob"], jobs["RayJob"]
    assert pytorch is not None and mpi is not None and ray is not None
    # Master 1 × 8 + Worker 3 × 8
    assert pytorch.gpu is not None and pytorch.gpu.count == 32 and pytorch.count == 1
    assert pytorch.gpu.model == "NVIDIA A100 80GB SXM" and pytorch.capacity is Capacity.SPOT
    assert pytorch.workload is not None
    assert pytorch.workload.volume_mount_paths == ["/mnt/checkpoints"]
    # the launcher holds no GPU; 2 workers × 4
    assert mpi.gpu is not None and mpi.gpu.count == 8 and mpi.capacity is Capacity.ON_DEMAND
    # head: none; gpu-workers 2 × 1; multi-host 1 replica × 2 hosts × 2
    assert ray.gpu is not None and ray.gpu.count == 6
    assert ray.workload is not None and ray.workload.queue_name == "research"
    assert pytorch.id == "PyTorchJob/research/llama-ft"


def test_workload_facts_read_from_the_pod_spec() -> None:
    obj = workload("StatefulSet", runtimeClassName="gvisor", schedulerName="volcano",
                   annotations={"gpuwarden.io/checkpoint": " s3://b/ck "})
    obj["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "state"}, "spec": {}}]
    obj["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "state", "mountPath": "/ckpt"}, {"name": "scratch", "mountPath": "/scratch"}]
    obj["spec"]["template"]["spec"]["volumes"] = [
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
    resource = workload_resource(obj)
    assert resource is not None and resource.workload is not None
    facts = resource.workload
    assert (facts.runtime_class_name, facts.scheduler_name, facts.checkpoint) == (
        "gvisor", "volcano", "s3://b/ck")
    assert facts.volume_mount_paths == ["/ckpt"]  # the generic ephemeral volume is not kept
    cron = workload("CronJob")
    cron["spec"]["jobTemplate"]["metadata"] = {"labels": {"kueue.x-k8s.io/queue-name": "q"}}
    cron_resource = workload_resource(cron)
    assert cron_resource is not None and cron_resource.workload is not None
    assert cron_resource.workload.queue_name == "q"


@pytest.mark.parametrize(
    ("pod", "shared"),
    [
        ({"resource": "nvidia.com/gpu.shared"}, True),
        ({"nodeSelector": {"nvidia.com/gpu.replicas": "4"}}, True),
        ({"nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}}, True),
        ({"nodeSelector": {"nvidia.com/gpu.sharing-strategy": "time-slicing"}}, True),
        ({"nodeSelector": {"cloud.google.com/gke-gpu-sharing-strategy": "time-sharing"}}, True),
        ({"nodeSelector": {"nvidia.com/gpu.replicas": "1"}}, False),
        ({"nodeSelector": {"nvidia.com/device-plugin.config": "t4-config"}}, None),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.replicas", "operator": "Gt",
                                       "values": ["1"]}]},
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
            ]}}}}, None),
        ({"resource": "nvidia.com/mig-1g.10gb"}, False),
        ({}, False),
    ],
)
def test_gpu_sharing_is_read_from_requests_and_node_selection(pod: dict[str, Any],
                                                              shared: bool | None) -> None:
    resource = workload_resource(workload("Pod", **pod))
    assert resource is not None and resource.workload is not None
    assert resource.workload.shared_gpu is shared
    assert resource.is_unknown("workload.shared_gpu") is (shared is None)


CRD_KIND = st.sampled_from(["PyTorchJob", "MPIJob", "RayJob"])
JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=2)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=2), max_leaves=6)


def _mutations(obj: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    paths = [("spec",), ("spec", "pytorchReplicaSpecs", "Worker"),
             ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
             ("spec", "rayClusterSpec", "workerGroupSpecs"), ("spec", "mpiReplicaSpecs")]

    def mutate(choice: tuple[tuple[str, ...], Any]) -> dict[str, Any]:
        path, junk = choice
        copied = copy.deepcopy(obj)
        node: Any = copied
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[path[-1]] = junk
        return copied

    return st.tuples(st.sampled_from(paths), JUNK).map(mutate)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_malformed_training_jobs_never_crash(data: st.DataObject) -> None:
    obj = data.draw(_mutations(training_jobs()[data.draw(CRD_KIND)]))
    resource = workload_resource(obj)
    if resource is not None:
        assert resource.count == 1
        assert resource.gpu is None or resource.gpu.count is None or resource.gpu.count >= 0
        resource.model_dump_json(exclude={"raw"})


# ---------------------------------------------------------------------------- spot-checkpointing


CKPT = "spot-checkpointing-required"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (workload(nodeSelector=SPOT), "fail"),
        (workload("Job", nodeSelector=SPOT), "fail"),
        # stateless serving restarts as it is: out of scope (issue 13, part 9)
        (workload("Deployment", nodeSelector=SPOT), None),
        (workload(nodeSelector=SPOT, annotations=CHECKPOINTED), "pass"),
        (workload(), None),  # not on spot: not applicable
        # an unreadable GPU request: whether it holds GPUs is unknown
        (workload(nodeSelector=SPOT, gpus="lots"), "unknown"),
    ],
)
def test_checkpointing_at_admission_warns(engine: Engine, obj: dict[str, Any],
                                          expected: str | None) -> None:
    response = admit(engine, obj)
    assert admission_verdict(engine, obj, CKPT) == expected
    assert warned_by(response, CKPT) is (expected == "fail")  # warn: never a denial
    assert not denied_by(response, CKPT)


@pytest.mark.parametrize(
    ("mount_path", "volume", "expected"),
    [
        ("/mnt/checkpoints", {"persistentVolumeClaim": {"claimName": "ck"}}, None),
        ("/workspace/CKPT", {"persistentVolumeClaim": {"claimName": "ck"}}, None),
        ("/data", {"persistentVolumeClaim": {"claimName": "ck"}}, "fail"),
        ("/mnt/checkpoints", {"emptyDir": {}}, "fail"),  # not persistent
    ],
)
def test_checkpoint_volume_must_be_persistent_and_at_a_checkpoint_path(
    engine: Engine, mount_path: str, volume: dict[str, Any], expected: str | None,
) -> None:
    obj = workload(nodeSelector=SPOT, volumes=[{"name": "ck", **volume}])
    obj["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "ck", "mountPath": mount_path}]
    response = admit(engine, obj)
    assert warned_by(response, CKPT) is (expected == "fail")
    assert admission_verdict(engine, obj, CKPT) == (expected or "pass")


def test_checkpointing_at_runtime_audits(engine: Engine) -> None:
    jobs = training_jobs()
    pod = workload("Pod", name="debug", nodeName="a100-spot-1")  # spot by its node's labels
    report = scan(engine, [pod, jobs["PyTorchJob"], workload("Job", name="od")])
    found = findings_of(report, CKPT)
    assert found["Pod/research/debug"].result == "fail"
    assert found["Pod/research/debug"].enforcement == "audit"
    assert found["PyTorchJob/research/llama-ft"].result == "pass"  # its PVC at /mnt/checkpoints
    assert "Job/research/od" not in found  # on-demand: not applicable
    # a workload exported without its Kubernetes facts (a normalized snapshot): unknown
    bare = Resource(provider="kubernetes", kind="Job", category="workload", id="Job/x/y",
                    name="y", namespace="x", capacity="spot", state="running",
                    gpu={"count": 1, "model": "NVIDIA L4"})
    unknown = engine.evaluate([bare], BUSINESS_HOURS)
    assert findings_of(unknown, CKPT)["Job/x/y"].result == "unknown"


def test_checkpointing_in_plans_reads_jobs_and_pipeline_steps(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, out = check_plan(FIXTURES / "sagemaker-plan.json", capsys, monkeypatch)
    found = {rid: f["result"] for rid, f in plan_findings(out, CKPT).items()}
    assert found == {
        "aws_sagemaker_training_job.llm_ft_no_checkpoint": "fail",
        "aws_sagemaker_training_job.llm_ft_checkpointed": "pass",
        "aws_sagemaker_training_job.llm_ft_computed_uri": "unknown",
        'aws_sagemaker_pipeline.train.steps["Train"]': "pass",  # S3Uri from a parameter default
        'aws_sagemaker_pipeline.train.steps["TrainNoCheckpoint"]': "fail",
        'aws_sagemaker_pipeline.train.steps["TrainJoinedUri"]': "unknown",  # Std:Join
    }
    failing = plan_findings(out, CKPT)["aws_sagemaker_training_job.llm_ft_no_checkpoint"]
    assert failing["enforcement"] == "warn" and "CheckpointConfig.S3Uri" in failing["message"]


def test_pipeline_steps_are_training_jobs_of_their_instance_type() -> None:
    plan = json.loads((FIXTURES / "sagemaker-plan.json").read_text())
    steps = {r.id: r for r in plan_resources(plan, "plan.json")
             if r.kind == "aws_sagemaker_pipeline.training_step"}
    train = steps['aws_sagemaker_pipeline.train.steps["Train"]']
    assert train.instance_type == "ml.g5.12xlarge"  # the parameter's DefaultValue
    assert train.gpu is not None and train.gpu.count == 4
    assert train.capacity is Capacity.SPOT and train.tags["team"] == "research"
    assert steps['aws_sagemaker_pipeline.train.steps["TrainNoCheckpoint"]'].count == 2


# ---------------------------------------------------------------------------- gpu-jobs-queued


QUEUED = "gpu-jobs-queued"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (workload("Job", namespace="batch"), "fail"),
        (workload("CronJob", namespace="batch"), "fail"),
        (workload("Job", namespace="batch", labels={"kueue.x-k8s.io/queue-name": "gpu"}), "pass"),
        (workload("Job", namespace="batch", schedulerName="volcano"), "pass"),
        (workload("Job", namespace="batch", gpus="x"), "unknown"),  # GPUs not readable
        (workload("Deployment", namespace="batch"), None),  # not a batch kind
        (workload("Job", namespace="research"), None),  # namespace not selected
    ],
)
def test_jobs_queued_at_admission(engine: Engine, obj: dict[str, Any],
                                  expected: str | None) -> None:
    response = admit(engine, obj)
    assert admission_verdict(engine, obj, QUEUED) == expected
    assert denied_by(response, QUEUED) is (expected == "fail")
    # an undecidable deny policy is worth a warning, not a denial
    assert warned_by(response, QUEUED) is (expected == "unknown")


def test_training_operator_jobs_are_queued_too(engine: Engine) -> None:
    job = copy.deepcopy(training_jobs()["PyTorchJob"])
    job["metadata"]["namespace"] = "batch"
    denied = admit(engine, job)
    assert denied_by(denied, QUEUED)
    assert "gpuwarden denied PyTorchJob/batch/llama-ft" in denied["status"]["message"]
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "research"
    assert admission_verdict(engine, job, QUEUED) == "pass"
    assert admit(engine, job)["allowed"]


def test_queue_namespaces_parameter_selects_without_a_label(tmp_path: Path) -> None:
    engine = Engine(load_policies(["builtin", overrides(tmp_path, QUEUED,
                                                        namespaces=["research"])]))
    assert denied_by(admit(engine, workload("Job", namespace="research")), QUEUED)


def test_jobs_queued_at_runtime(engine: Engine) -> None:
    ray = copy.deepcopy(training_jobs()["RayJob"])
    ray["metadata"]["namespace"] = "batch"
    objects = [workload("Job", name="loose", namespace="batch"), ray,
               workload("Job", name="odd", namespace="batch", gpus="-1")]
    found = findings_of(scan(engine, objects), QUEUED)
    assert found["Job/batch/loose"].result == "fail"
    assert found["Job/batch/loose"].enforcement == "audit"
    assert found["RayJob/batch/tune-sweep"].result == "pass"  # its Kueue label
    assert found["Job/batch/odd"].result == "unknown"


# ---------------------------------------------------------------------------- gpu-right-size


RIGHT_SIZE = "gpu-right-size"
DAY = 86400


def instance(instance_type: str, *, peak: float | None = None, activity: float | None = 60.0,
             window: int = 7 * DAY, category: str = "instance",
             rid: str = "i-0a1b2c3d4e5f60718") -> Resource:
    telemetry = None if peak is None and activity is None else {
        "average_activity_pct": activity, "peak_memory_gib": peak, "samples": 2016,
        "window_seconds": window, "metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    bundle = {"resources": [{
        "provider": "aws" if "." in instance_type else "gcp", "kind": "aws_instance",
        "category": category, "id": rid, "name": rid, "instance_type": instance_type,
        "state": "running", "capacity": "on-demand", "tags": TAGS, "telemetry": telemetry}]}
    [resource] = snapshot_resources(bundle, SnapshotContext("snap.yaml", builtin_catalog()))
    return resource


def right_size(engine: Engine, resource: Resource) -> Finding | None:
    report = engine.evaluate([resource], BUSINESS_HOURS, show_passed=True)
    return findings_of(report, RIGHT_SIZE).get(resource.id)


def test_right_size_names_the_sibling_and_the_saving(engine: Engine) -> None:
    finding = right_size(engine, instance("p4de.24xlarge", peak=20.0))
    assert finding is not None and finding.result == "fail"
    assert finding.severity is Severity.MEDIUM and finding.enforcement == "audit"
    catalog = builtin_catalog()
    big, small = catalog.instances["p4de.24xlarge"], catalog.instances["p4d.24xlarge"]
    assert big.on_demand_usd_hr is not None and small.on_demand_usd_hr is not None
    saving = (big.on_demand_usd_hr - small.on_demand_usd_hr) * HOURS_PER_MONTH
    assert finding.estimated_monthly_usd == pytest.approx(saving, abs=0.01)
    assert finding.details["sibling"] == "p4d.24xlarge" and "p4d.24xlarge" in finding.message
    assert finding.details["peak_memory_pct"] == 25.0


@pytest.mark.parametrize(
    ("instance_type", "sibling"),
    [("a2-ultragpu-8g", "a2-highgpu-8g"), ("a2-ultragpu-1g", "a2-highgpu-1g"),
     ("Standard_ND96amsr_A100_v4", "Standard_ND96asr_v4"), ("p4de.24xlarge", "p4d.24xlarge"),
     ("p4d.24xlarge", None), ("p5en.48xlarge", None), ("g5.12xlarge", None)],
)
def test_smaller_siblings_come_from_the_catalog(instance_type: str, sibling: str | None) -> None:
    found = builtin_catalog().smaller_sibling(instance_type)
    assert (found.name if found else None) == sibling
    if found is not None:
        current = builtin_catalog().instances[instance_type]
        assert found.cloud == current.cloud and found.gpu_count == current.gpu_count
        assert found.gpu_memory_gib < current.gpu_memory_gib


@pytest.mark.parametrize(
    ("resource_args", "expected"),
    [
        ({"instance_type": "p4de.24xlarge", "peak": 40.0}, "pass"),  # 50% of 80 GiB
        ({"instance_type": "p4de.24xlarge", "peak": 20.0, "window": 3600}, "unknown"),
        ({"instance_type": "p4de.24xlarge", "peak": None, "activity": None}, "unknown"),
        ({"instance_type": "p4d.24xlarge", "peak": 2.0}, "pass"),  # no smaller sibling
        ({"instance_type": "p3.2xlarge", "activity": 80.0}, "fail"),  # legacy, training
        ({"instance_type": "p3.2xlarge", "activity": 10.0}, "pass"),  # legacy, not busy
        ({"instance_type": "p3.2xlarge", "peak": None, "activity": None}, "unknown"),
    ],
)
def test_right_size_verdicts(engine: Engine, resource_args: dict[str, Any],
                             expected: str) -> None:
    finding = right_size(engine, instance(**resource_args))
    assert finding is not None and finding.result == expected


def test_legacy_training_job_gets_a_low_severity_advisory(engine: Engine) -> None:
    finding = right_size(engine, instance("ml.p3.8xlarge", category="training_job",
                                          peak=None, activity=None, rid="finetune"))
    assert finding is None  # an ml. type is priced as EC2 only by the adapters
    legacy = right_size(engine, instance("p3.8xlarge", category="training_job", peak=None,
                                         activity=None, rid="finetune"))
    assert legacy is not None and legacy.result == "fail" and legacy.severity is Severity.LOW
    assert legacy.details["newer_type"] == "g5.12xlarge" and "g5.12xlarge" in legacy.message
    catalog = builtin_catalog()
    old, new = catalog.instances["p3.8xlarge"], catalog.instances["g5.12xlarge"]
    assert old.on_demand_usd_hr is not None and new.on_demand_usd_hr is not None
    assert legacy.estimated_monthly_usd == pytest.approx(
        (old.on_demand_usd_hr - new.on_demand_usd_hr) * HOURS_PER_MONTH, abs=0.01)
    ncv3 = builtin_catalog().newer_equivalent("Standard_NC24s_v3")
    assert ncv3 is not None and ncv3.newer_type == "Standard_NC96ads_A100_v4"
    assert "retire" in ncv3.reason


def test_right_size_is_off_at_the_plan_door(engine: Engine) -> None:
    planned = instance("p4de.24xlarge", peak=5.0).model_copy(update={"state": State.PLANNED})
    report = engine.evaluate([planned], BUSINESS_HOURS, show_passed=True)
    assert RIGHT_SIZE not in {f.policy for f in report.findings}


# ---------------------------------------------------------------------------- team-gpu-budget


BUDGET = "team-gpu-budget"


def priced(instance_type: str) -> float:
    hourly = builtin_catalog().instances[instance_type].on_demand_usd_hr
    assert hourly is not None
    return round(hourly * HOURS_PER_MONTH, 2)


def budget_engine(tmp_path: Path, **budgets: float) -> Engine:
    return Engine(load_policies(["builtin", overrides(tmp_path, BUDGET, budgets=budgets)]))


def team_estate() -> list[Resource]:
    def make(rid: str, instance_type: str, **fields: Any) -> dict[str, Any]:
        return {"provider": "aws", "kind": "aws_instance", "category": "instance", "id": rid,
                "name": rid, "instance_type": instance_type, "state": "running",
                "capacity": "on-demand", "tags": {**TAGS, **fields.pop("tags", {})}, **fields}

    bundle = {"resources": [
        make("i-trainer", "p4d.24xlarge"),
        make("i-spot", "g5.12xlarge", capacity="spot"),
        make("i-dev", "g5.xlarge", tags={"gpuwarden-offhours": "off=(M-F,19);on=(M-F,7);tz=utc"}),
        make("i-stopped", "p4d.24xlarge", state="stopped"),
        make("i-vision", "g5.48xlarge", tags={"team": "vision"}),
    ]}
    return snapshot_resources(bundle, SnapshotContext("snap.yaml", builtin_catalog()))


def test_runtime_budget_projects_spot_and_off_hours_run_rates(tmp_path: Path) -> None:
    resources = team_estate()
    catalog = builtin_catalog()
    expected = (priced("p4d.24xlarge") + priced("g5.12xlarge") * (1 - catalog.spot_discount("aws"))
                + priced("g5.xlarge") * (60 / 168))  # on 12 h × 5 days of 168
    engine = budget_engine(tmp_path, research=10_000, vision=100_000)
    report = engine.evaluate(resources, BUSINESS_HOURS, show_passed=True)
    found = findings_of(report, BUDGET)
    research = found["team/research"]
    assert research.result == "fail" and research.enforcement == "audit"
    assert "is on course for" in research.message  # the runtime wording
    assert research.details["monthly_usd"] == pytest.approx(expected, abs=0.05)
    assert research.estimated_monthly_usd == pytest.approx(expected - 10_000, abs=0.05)
    assert [t["id"] for t in research.details["top_resources"]] == [
        "i-trainer", "i-spot", "i-dev"]  # the stopped instance is not running: not counted
    assert "i-trainer" in research.message
    assert found["team/vision"].result == "pass"
    assert research.resource.provider == "gpuwarden" and research.resource.kind == "Team"


def test_runtime_budget_unknown_when_a_member_has_no_price(tmp_path: Path) -> None:
    unpriced = Resource(provider="kubernetes", kind="Job", category="workload",
                        id="Job/research/mystery", name="mystery", namespace="research",
                        state="running", tags=TAGS, gpu={"count": 4})  # GPU model unknown
    engine = budget_engine(tmp_path, research=50_000)
    found = findings_of(engine.evaluate([*team_estate(), unpriced], BUSINESS_HOURS), BUDGET)
    assert found["team/research"].result == "unknown"
    over = budget_engine(tmp_path, research=1_000)
    found = findings_of(over.evaluate([*team_estate(), unpriced], BUSINESS_HOURS), BUDGET)
    assert found["team/research"].result == "fail"  # over budget whatever the unpriced cost


def test_teams_without_a_budget_are_not_judged(engine: Engine) -> None:
    report = engine.evaluate(team_estate(), BUSINESS_HOURS, show_passed=True)
    assert BUDGET not in {f.policy for f in report.findings}


def test_plan_cost_diff_per_team(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    budgets = str(FIXTURES / "budgets.yaml")
    code, out = check_plan(FIXTURES / "budget-plan.json", capsys, monkeypatch,
                           overrides(tmp_path, BUDGET, budgets_file=budgets))
    report = json.loads(out)
    teams = {t["team"]: t for t in report["cost_diff"]["teams"]}
    p4d, g5_12, g5_48 = priced("p4d.24xlarge"), priced("g5.12xlarge"), priced("g5.48xlarge")
    p3_8, a2, g5_1 = priced("p3.8xlarge"), priced("a2-highgpu-1g"), priced("g5.xlarge")
    assert teams["nlp"]["removed_monthly_usd"] == pytest.approx(p3_8)
    assert teams["nlp"]["planned_monthly_usd"] == 0
    # resized g5.12xlarge → g5.48xlarge, an unchanged a2 notebook, and a g5.xlarge moved in
    assert teams["vision"]["added_monthly_usd"] == pytest.approx(g5_48 - g5_12 + g5_1, abs=0.02)
    assert teams["vision"]["previous_monthly_usd"] == pytest.approx(g5_12 + a2, abs=0.02)
    assert teams["vision"]["planned_monthly_usd"] == pytest.approx(g5_48 + a2 + g5_1, abs=0.02)
    # research: a new p4d, the g5.xlarge moved out, an instance whose type is not known yet
    assert teams["research"]["net_monthly_usd"] == pytest.approx(p4d - g5_1, abs=0.02)
    assert teams["research"]["unpriced"] == 1
    actions = {c["id"]: c["action"] for t in teams.values() for c in t["resources"]}
    assert actions["aws_instance.legacy"] == "delete" and actions["aws_instance.eval"] == "update"
    assert 'google_compute_instance.notebook["a100"]' not in actions  # no-op: totals only
    diff = report["cost_diff"]
    assert diff["net_monthly_usd"] == pytest.approx(
        diff["added_monthly_usd"] - diff["removed_monthly_usd"], abs=0.02)
    # research goes over its 15,000 budget: the finding gates (deny at the plan door)
    found = plan_findings(out, BUDGET)
    assert code == 1 and found["team/research"]["result"] == "fail"
    assert found["team/research"]["enforcement"] == "deny"
    assert "would run" in found["team/research"]["message"]  # the plan wording
    assert found["team/research"]["details"]["net_usd"] == teams["research"]["net_monthly_usd"]
    assert found["team/vision"]["result"] == "pass"  # under 20,000
    assert found["team/nlp"]["result"] == "pass"  # over nothing: the change lowers its spend


def test_plan_budget_unknown_when_the_change_is_not_priced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, out = check_plan(FIXTURES / "budget-plan.json", capsys, monkeypatch,
                        overrides(tmp_path, BUDGET, budgets={"research": 50_000}))
    assert plan_findings(out, BUDGET)["team/research"]["result"] == "unknown"


def test_pr_comment_shows_the_cost_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _, out = check_plan(FIXTURES / "budget-plan.json", capsys, monkeypatch,
                        overrides(tmp_path, BUDGET, budgets_file=str(FIXTURES / "budgets.yaml")),
                        fmt="markdown")
    assert "### GPU cost change by team" in out
    research = next(line for line in out.splitlines() if line.startswith("| research |"))
    assert "⚠️ over" in research and "(1 not priced)" in research
    nlp = next(line for line in out.splitlines() if line.startswith("| nlp |"))
    assert f"−${priced('p3.8xlarge'):,.2f}" in nlp
    # a report without a diff has no such section
    plain = render_markdown(RenderContext(report=Report(generated_at=BUSINESS_HOURS)))
    assert "GPU cost change" not in plain


def test_plan_cost_changes_keep_policies_blind_to_deletes() -> None:
    plan = json.loads((FIXTURES / "budget-plan.json").read_text())
    evaluated = {r.id for r in plan_resources(plan, "plan.json")}
    assert "aws_instance.legacy" not in evaluated  # a delete
    changes = {c.address: c for c in plan_cost_changes(plan, "plan.json")}
    legacy = changes["aws_instance.legacy"]
    assert legacy.action == "delete" and not legacy.after
    assert legacy.before[0].instance_type == "p3.8xlarge"
    assert changes['google_compute_instance.notebook["a100"]'].action == "no-op"


def test_budgets_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "budgets.yaml"
    bad.write_text("research: 1000\nvision: lots\n")
    with pytest.raises(InputError) as raised:
        read_budgets_file(str(bad))
    assert str(raised.value).startswith(f"{bad}:2: budget of team 'vision'")
    with pytest.raises(InputError, match="cannot read budgets file"):
        read_budgets_file(str(tmp_path / "absent.yaml"))
    from_file = read_budgets_file(str(FIXTURES / "budgets.yaml"))
    merged = inline_budgets({"Research": 5}).over(from_file)
    assert merged.of("research") == 5.0 and merged.of(" Vision ") == 20_000.0
    with pytest.raises(InputError) as raised:  # at policy load, naming the budgets file
        load_policies(["builtin", overrides(tmp_path, BUDGET, budgets_file=str(bad))])
    assert str(raised.value).startswith(f"{bad}:2: budget of team 'vision'")


def test_budgets_file_is_read_by_the_loader_once_never_while_compiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.core.policy import compile_policy
    from engine.loading import parameter_files

    reads: list[str] = []

    def counted(path: str) -> Any:
        reads.append(path)
        return read_budgets_file(path)

    monkeypatch.setitem(parameter_files.READERS, "budgets", counted)
    budgets = str(FIXTURES / "budgets.yaml")
    again = tmp_path / "again.yaml"  # a second override recompiles the policy, same file
    again.write_text(yaml.safe_dump({"overrides": {BUDGET: {"parameters": {"team_tag": "team"}}}}))
    [policy] = [p for p in load_policies(["builtin", overrides(tmp_path, BUDGET,
                                                               budgets_file=budgets), str(again)])
                if p.id == BUDGET]
    assert reads == [budgets]
    assert policy.spec.parameters["budgets_file"] == budgets  # what `policies show` prints
    # Compiling without the loading layer does no I/O: the path is refused, not read.
    with pytest.raises(InputError, match="was not read"):
        compile_policy(policy.spec, "x.yaml", policy.raw)
    assert reads == [budgets]


def test_a_custom_budget_check_names_its_own_file_parameter(tmp_path: Path) -> None:
    policy_file = tmp_path / "mine.yaml"
    policy_file.write_text(yaml.safe_dump({"apiVersion": "gpuwarden.io/v1", "policies": [{
        "id": "my-team-budget", "title": "t", "severity": "low", "resources": ["instance"],
        "aggregate": "team-budget",
        "parameters": {"limits": str(FIXTURES / "budgets.yaml"), "none": {}},
        "scope": {"has-gpu": True},
        "violation": {"over-budget": {"file_param": "limits", "budgets_param": "none"}},
        "message": "{{ r.name }} {{ r.group.spend.monthly_usd }}"}]}))
    engine = Engine(load_policies([str(policy_file)]))
    report = engine.evaluate(team_estate(), BUSINESS_HOURS, show_passed=True)
    found = findings_of(report, "my-team-budget")
    assert found["team/research"].result == "fail"  # over its 15,000 from the file
    assert found["team/vision"].result == "pass"  # under its 20,000 from the file
    monthly = found["team/research"].details["monthly_usd"]
    assert found["team/research"].message == f"research {monthly}"


def test_group_facts_are_typed_fields_conditions_can_read(tmp_path: Path) -> None:
    policy_file = tmp_path / "groups.yaml"
    policy_file.write_text(yaml.safe_dump({"apiVersion": "gpuwarden.io/v1", "policies": [{
        "id": "big-teams", "title": "t", "severity": "low", "resources": ["instance"],
        "aggregate": "team-budget",
        "parameters": {"budgets": {"research": 1, "vision": 1}, "budgets_file": None},
        "scope": {"all": [{"has-gpu": True}, {"field": "state", "op": "eq", "value": "running"}]},
        "violation": {"all": [{"over-budget": {}},  # teams with a budget form groups
                              {"field": "group.spend.monthly_usd", "op": "gt", "value": 15_000}]},
        "message": "{{ r.group.spend.top_resources | map(attribute='id') | join(',') }}"}]}))
    engine = Engine(load_policies([str(policy_file)]))
    found = findings_of(engine.evaluate(team_estate(), BUSINESS_HOURS, show_passed=True),
                        "big-teams")
    assert found["team/research"].result == "fail"
    assert found["team/research"].message == "i-trainer,i-spot,i-dev"
    assert found["team/vision"].result == "pass"  # one g5.48xlarge: about 11,900 a month
    assert all(r.group is None for r in team_estate())  # only groups carry group facts


def test_bad_inline_budget_is_a_policy_error(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = overrides(tmp_path, BUDGET, budgets={"research": -5})
    code, _, err = run_cli(["policies", "validate", "builtin", path], capsys, monkeypatch)
    assert code == 2 and "must be a non-negative number" in err and "Traceback" not in err


def test_team_and_run_rate_helpers() -> None:
    [resource] = [r for r in team_estate() if r.id == "i-spot"]
    assert team_of(resource) == "research"
    workload_in_team_ns = Resource(provider="kubernetes", kind="Job", category="workload",
                                   id="Job/ns/j", name="j", namespace_labels={"Team": "infra"})
    assert team_of(workload_in_team_ns) == "infra"
    rate = run_rate(resource, builtin_catalog())
    assert rate.monthly_usd == pytest.approx(priced("g5.12xlarge") * 0.4, abs=0.01)
    assert "spot discount 60%" in rate.basis


# ---------------------------------------------------------------------------- untrusted tenants


SANDBOX = "untrusted-gpu-sandboxed"
SHARED = "shared-gpu-requires-mig"


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ({}, "fail"),
        ({"runtimeClassName": "nvidia"}, "fail"),
        ({"runtimeClassName": "gvisor"}, "pass"),
        ({"runtimeClassName": "kata-qemu"}, "pass"),
        ({"runtimeClassName": "gvisor", "gpus": "one"}, "pass"),  # sandboxed whatever it holds
        ({"gpus": "one"}, "unknown"),
    ],
)
def test_untrusted_gpu_pods_run_sandboxed_at_admission(engine: Engine, pod: dict[str, Any],
                                                       expected: str) -> None:
    obj = workload("Pod", namespace="tenant-a", annotations=CHECKPOINTED, **pod)
    response = admit(engine, obj)
    assert admission_verdict(engine, obj, SANDBOX) == expected
    assert denied_by(response, SANDBOX) is (expected == "fail")


def test_sandbox_is_not_required_elsewhere(engine: Engine) -> None:
    assert admission_verdict(engine, workload("Pod"), SANDBOX) is None


def test_untrusted_sandbox_at_runtime(engine: Engine) -> None:
    jobs = training_jobs()
    sandboxed = copy.deepcopy(jobs["PyTorchJob"])
    sandboxed["metadata"]["namespace"] = "tenant-a"
    for spec in sandboxed["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["runtimeClassName"] = "kata"
    mixed = copy.deepcopy(sandboxed)
    mixed["metadata"]["name"] = "mixed"
    mixed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].pop("runtimeClassName")
    objects = [sandboxed, mixed, workload("Deployment", name="odd", namespace="tenant-a",
                                          gpus="2.5")]
    found = findings_of(scan(engine, objects), SANDBOX)
    assert found["PyTorchJob/tenant-a/llama-ft"].result == "pass"
    assert found["PyTorchJob/tenant-a/mixed"].result == "fail"  # a worker template unsandboxed
    assert found["Deployment/tenant-a/odd"].result == "unknown"


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ({"resource": "nvidia.com/gpu.shared"}, "fail"),
        ({"nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}}, "fail"),
        ({"resource": "nvidia.com/mig-1g.10gb"}, "pass"),
        ({}, "pass"),
        ({"nodeSelector": {"nvidia.com/device-plugin.config": "t4-config"}}, "unknown"),
    ],
)
def test_shared_gpus_need_mig_at_admission(engine: Engine, pod: dict[str, Any],
                                           expected: str) -> None:
    obj = workload("Pod", namespace="tenant-a", runtimeClassName="gvisor",
                   annotations=CHECKPOINTED, **pod)
    response = admit(engine, obj)
    assert admission_verdict(engine, obj, SHARED) == expected
    assert denied_by(response, SHARED) is (expected == "fail")
    assert warned_by(response, SHARED) is (expected == "unknown")


def test_shared_gpus_need_mig_at_runtime(engine: Engine) -> None:
    on_shared_node = workload("Pod", name="tsliced", namespace="tenant-a",
                              nodeName="t4-shared-1")
    on_whole_gpus = workload("Pod", name="whole", namespace="tenant-a", nodeName="a100-spot-1")
    # its node is gone from the listing; it pins a device-plugin config: cannot tell
    orphan = workload("Pod", name="orphan", namespace="tenant-a", nodeName="gone",
                      nodeSelector={"nvidia.com/device-plugin.config": "t4-config"})
    found = findings_of(scan(engine, [on_shared_node, on_whole_gpus, orphan]), SHARED)
    assert found["Pod/tenant-a/tsliced"].result == "fail"
    assert found["Pod/tenant-a/whole"].result == "pass"
    assert found["Pod/tenant-a/orphan"].result == "unknown"


# ---------------------------------------------------------------------------- network policies


NETPOL = "gpu-namespace-network-policy"


def network_policy(namespace: str, name: str = "default-deny") -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}


def test_namespaces_running_gpus_need_a_network_policy(engine: Engine) -> None:
    objects = [workload("Job", name="a", namespace="research"),
               workload("Deployment", name="b", namespace="research"),
               workload("Job", name="c", namespace="batch"),
               workload("Job", name="cpu", namespace="tenant-a", gpus=0)]
    report = scan(engine, objects, network_policies=[network_policy("batch")])
    found = findings_of(report, NETPOL)
    assert set(found) == {"Namespace/research", "Namespace/batch"}  # tenant-a runs no GPUs
    research = found["Namespace/research"]
    assert research.result == "fail" and research.enforcement == "audit"
    assert "Deployment/research/b" in research.message and "Job/research/a" in research.message
    assert found["Namespace/batch"].result == "pass"
    unlisted = findings_of(scan(engine, objects, network_policies=None), NETPOL)
    assert {f.result for f in unlisted.values()} == {"unknown"}
    assert "NetworkPolicies were not listed" in unlisted["Namespace/research"].message


def test_network_policy_exemption_by_namespace_label(engine: Engine) -> None:
    state = ClusterState(namespaces=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "lab", "labels": {"gpuwarden.io/exempt": NETPOL}}}],
        workloads=[workload("Job", namespace="lab")], network_policies=[])
    report = engine.evaluate(cluster_resources(state), BUSINESS_HOURS, show_passed=True)
    assert NETPOL not in {f.policy for f in report.findings}
    assert report.summary.exempted >= 1


def test_network_policies_survive_a_snapshot_round_trip(engine: Engine) -> None:
    listed_empty = ClusterState(namespaces=copy.deepcopy(NAMESPACES),
                                workloads=[workload("Job")], network_policies=[])
    section = kubernetes_snapshot(listed_empty)
    again = snapshot_resources({"kubernetes": section},
                               SnapshotContext("snap.json", builtin_catalog()))
    report = engine.evaluate(again, BUSINESS_HOURS)
    assert findings_of(report, NETPOL)["Namespace/research"].result == "fail"  # not unknown


def test_network_policies_are_not_judged_at_other_doors(engine: Engine) -> None:
    assert admission_verdict(engine, workload("Job"), NETPOL) is None


# ---------------------------------------------------------------------------- the live listing


@pytest.fixture
def live_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    """The loopback fake API server of test_kubernetes_live, also serving NetworkPolicies and
    PyTorchJobs."""
    from http.server import ThreadingHTTPServer
    from threading import Thread

    from tests import test_kubernetes_live as live

    monkeypatch.setitem(live.COLLECTIONS, "/apis/networking.k8s.io/v1/networkpolicies",
                        ("NetworkPolicy", "networking.k8s.io/v1"))
    monkeypatch.setitem(live.COLLECTIONS, "/apis/kubeflow.org/v1/pytorchjobs",
                        ("PyTorchJob", "kubeflow.org/v1"))
    objects = live.estate()
    objects["NetworkPolicy"] = [network_policy("prod")]
    job = training_jobs()["PyTorchJob"]
    job["metadata"] = {**job["metadata"], "namespace": "ml", "uid": "uid-pt",
                       "resourceVersion": "100"}
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    done = copy.deepcopy(job)
    done["metadata"]["name"] = "finished"
    done["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    objects["PyTorchJob"] = [
        {k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in (job, done)]
    api = live.FakeApi(objects)
    server = ThreadingHTTPServer(("127.0.0.1", 0), live.make_handler(api))
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_live_listing_reads_network_policies_and_training_jobs(
    live_api: tuple[Any, str], engine: Engine,
) -> None:
    from engine.sources.kubernetes.live import list_cluster
    from tests.test_kubernetes_live import api_client

    api, url = live_api
    state = list_cluster(api_client(url), chunk=1)
    assert state.network_policy_counts() == {"prod": 1}
    resources = {r.id: r for r in cluster_resources(state)}
    assert "PyTorchJob/ml/llama-ft" in resources  # a finished job is not audited
    assert "PyTorchJob/ml/finished" not in resources
    found = findings_of(engine.evaluate(resources.values(), BUSINESS_HOURS, show_passed=True),
                        NETPOL)
    assert found["Namespace/ml"].result == "fail" and found["Namespace/prod"].result == "pass"
    assert not api.mutations()
    listed = {r.path for r in api.requests}
    assert "/apis/ray.io/v1/rayjobs" in listed  # asked for, answered 404: skipped quietly
    # the MPI operator's version first, then the training operator's
    assert {"/apis/kubeflow.org/v2beta1/mpijobs", "/apis/kubeflow.org/v1/mpijobs"} <= listed


def test_network_policies_forbidden_leave_the_count_unknown(
    live_api: tuple[Any, str], engine: Engine,
) -> None:
    from engine.sources.kubernetes.live import list_cluster
    from tests.test_kubernetes_live import api_client

    api, url = live_api
    api.forbidden.add("list:NetworkPolicy")
    state = list_cluster(api_client(url))
    assert state.network_policies is None and state.network_policy_counts() is None
    found = findings_of(engine.evaluate(cluster_resources(state), BUSINESS_HOURS), NETPOL)
    assert {f.result for f in found.values()} == {"unknown"}


# ---------------------------------------------------------------------------- the demo additions


def merged_demo_estate() -> dict[str, Any]:
    """engine/data/demo/estate.yaml with tests/fixtures/guardrails-demo.yaml merged in, as the
    lead will merge it."""
    from engine.demo import demo_snapshot_path

    estate: dict[str, Any] = yaml.safe_load(demo_snapshot_path().read_text())
    extra = yaml.safe_load(DEMO_FIXTURE.read_text())
    estate["terraform_plans"][0]["plan"]["resource_changes"] += extra["terraform_resource_changes"]
    estate["kubernetes"]["objects"] += extra["kubernetes_objects"]
    estate["resources"] = [*(estate.get("resources") or []), *extra["resources"]]
    return estate


def test_demo_additions_show_a_finding_for_each_guardrail(tmp_path: Path) -> None:
    extra = yaml.safe_load(DEMO_FIXTURE.read_text())
    policy_file = tmp_path / "demo-overrides.yaml"
    policy_file.write_text(yaml.safe_dump(extra["policy_overrides"]))
    engine = Engine(load_policies(["builtin", str(policy_file)]))
    resources = snapshot_resources(merged_demo_estate(),
                                   SnapshotContext("estate.yaml", engine.catalog))
    report = engine.evaluate(resources, BUSINESS_HOURS)
    failing = {f.policy for f in report.findings if f.result == "fail"}
    assert {CKPT, QUEUED, RIGHT_SIZE, BUDGET, SANDBOX, SHARED, NETPOL} <= failing


def test_demo_plan_pr_comment_has_the_cost_diff(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "demo-plan.json"
    plan.write_text(json.dumps(merged_demo_estate()["terraform_plans"][0]["plan"]))
    _, out = check_plan(plan, capsys, monkeypatch, fmt="markdown")
    assert "### GPU cost change by team" in out
    assert "| research |" in out and "| vision |" in out
