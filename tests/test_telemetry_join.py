"""Joining GPU readings to resources by stable keys, summarizing them, and unowned GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.model import Capacity, Category, GpuSpec, Resource, State
from engine.sources.kubernetes import workload_resource
from engine.telemetry.hosts import host_keys, parse_provider_id
from engine.telemetry.join import join_readings, summarize
from engine.telemetry.owners import OwnerIndex, minimal_owner
from engine.telemetry.series import GpuSeries

CATALOG = builtin_catalog()


def k8s(kind: str, name: str, namespace: str = "ml", gpus: int = 1) -> Resource:
    template = {"metadata": {}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}]}}
    spec: dict[str, Any] = ({"jobTemplate": {"spec": {"template": template}}}
                            if kind == "CronJob" else {"template": template})
    obj = {"kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    if kind == "Pod":
        obj["spec"] = template["spec"]
    resource = workload_resource(obj, catalog=CATALOG)
    assert resource is not None
    return resource


def pod(name: str, owner_kind: str | None, owner: str | None, namespace: str = "ml",
        **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner_kind:
        metadata["ownerReferences"] = [{"kind": owner_kind, "name": owner, "controller": True}]
    return {"kind": "Pod", "metadata": metadata}


def reading(pod_name: str | None = None, namespace: str | None = "ml", *, host: str = "node-1",
            gpu: str = "0", activity: float | None = 1.0, **extra: Any) -> GpuSeries:
    fields: dict[str, Any] = {"hostname": host, "uuid": f"GPU-{host}-{gpu}", "gpu": gpu,
                              "pod": pod_name, "namespace": namespace if pod_name else None,
                              "activity_pct": activity, "samples": 60, "window_seconds": 3600,
                              "activity_metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    fields.update(extra)
    return GpuSeries(**fields)


# ---------------------------------------------------------------------------- pod → workload


@pytest.mark.parametrize(("objects", "pod_name", "expected"), [
    # ReplicaSet object present: its own ownerReference names the Deployment
    ([pod("web-7d9f8-x", "ReplicaSet", "web-7d9f8"),
      {"kind": "ReplicaSet", "metadata": {"name": "web-7d9f8", "namespace": "ml",
       "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": True}]}}],
     "web-7d9f8-x", "Deployment/ml/web"),
    # no ReplicaSet object: the pod-template-hash says where the Deployment's name ends
    ([pod("web-7d9f8-x", "ReplicaSet", "web-7d9f8", **{"pod-template-hash": "7d9f8"})],
     "web-7d9f8-x", "Deployment/ml/web"),
    # Pod → Job → CronJob through the Job object
    ([pod("eval-123-abcde", "Job", "eval-123"),
      {"kind": "Job", "metadata": {"name": "eval-123", "namespace": "ml",
       "ownerReferences": [{"kind": "CronJob", "name": "nightly", "controller": True}]}}],
     "eval-123-abcde", "CronJob/ml/nightly"),
    # Pod → Job (not listed, finished) → CronJob by the scheduled-minute name
    ([pod("nightly-29412345-abcde", "Job", "nightly-29412345")],
     "nightly-29412345-abcde", "CronJob/ml/nightly"),
    ([pod("db-0", "StatefulSet", "db")], "db-0", "StatefulSet/ml/db"),
    # no objects at all: the names controllers give their pods
    ([], "db-1", "StatefulSet/ml/db"),
    ([], "web-5f6d7c8b9-q2w3e", "Deployment/ml/web"),
    ([], "nightly-29412345-q2w3e", "CronJob/ml/nightly"),
    ([], "debug", "Pod/ml/debug"),
])
def test_pods_resolve_to_their_workload(objects: list[dict[str, Any]], pod_name: str,
                                        expected: str) -> None:
    resources = [k8s("Deployment", "web"), k8s("CronJob", "nightly"),
                 k8s("StatefulSet", "db"), k8s("Pod", "debug")]
    found = OwnerIndex(resources, objects).workload("ml", pod_name)
    assert found is not None and found.id == expected


def test_the_nearest_listed_workload_wins_and_guesses_are_not_made() -> None:
    running_job = k8s("Job", "nightly-29412345")
    resources = [k8s("CronJob", "nightly"), running_job, k8s("Deployment", "web"),
                 k8s("Job", "web-5f6d7")]
    index = OwnerIndex(resources, [pod("nightly-29412345-abcde", "Job", "nightly-29412345")])
    assert index.workload("ml", "nightly-29412345-abcde") is running_job
    # "web-5f6d7-q2w3e" could be Deployment web's pod or Job web-5f6d7's: longest name wins
    assert index.workload("ml", "web-5f6d7-q2w3e") == resources[3]
    assert index.workload("ml", "unrelated") is None
    assert index.workload("other", "web-5f6d7c8b9-q2w3e") is None


def test_a_pod_of_a_workload_without_gpus_is_joined_by_node() -> None:
    exporter = k8s("DaemonSet", "dcgm-exporter", gpus=0)
    instance = Resource(provider="aws", kind="aws_instance", category=Category.INSTANCE,
                        id="i-0abc12345678", name="box", state=State.RUNNING,
                        gpu=GpuSpec(model="NVIDIA A10G", count=1))
    nodes = [{"kind": "Node", "metadata": {"name": "node-1"},
              "spec": {"providerID": "aws:///us-east-1a/i-0abc12345678"}}]
    result = join_readings([exporter, instance], [reading("dcgm-exporter-abcde")],
                           catalog=CATALOG, objects=nodes)
    assert result.joins[0].targets == ("i-0abc12345678",)
    assert result.resources[0].telemetry is None and result.resources[1].telemetry is not None


# ---------------------------------------------------------------------------- host → instance


@pytest.mark.parametrize(("provider_id", "provider", "keys", "region"), [
    ("aws:///us-east-1a/i-0abc1234567890def", "aws", (("aws-id", "i-0abc1234567890def"),),
     "us-east-1"),
    ("gce://proj/us-central1-a/gpu-box", "gcp", (("gce", "us-central1-a", "gpu-box"),),
     "us-central1"),
    ("azure:///subscriptions/S/resourceGroups/RG/providers/Microsoft.Compute/"
     "virtualMachineScaleSets/pool/virtualMachines/3", "azure",
     (("azure", "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/"
                "virtualmachinescalesets/pool/virtualmachines/3"),
      ("azure", "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/"
                "virtualmachinescalesets/pool")), None),
])
def test_provider_ids(provider_id: str, provider: str, keys: tuple[tuple[str, ...], ...],
                      region: str | None) -> None:
    cloud = parse_provider_id(provider_id)
    assert cloud is not None
    assert (cloud.provider, cloud.keys, cloud.region) == (provider, keys, region)
    assert parse_provider_id("kind://docker/node") is None


def test_host_names_say_what_they_can() -> None:
    assert ("ip", "10.0.1.23") in host_keys("ip-10-0-1-23.ec2.internal")
    assert ("aws-id", "i-0abc12345678") in host_keys("i-0abc12345678.us-west-2.compute.internal")
    assert ("gce", "us-central1-a", "gpu-box") in \
        host_keys("gpu-box.us-central1-a.c.my-proj.internal")


def cloud(provider: str, id_: str, name: str, **raw: Any) -> Resource:
    return Resource(provider=provider, kind=f"{provider}_vm", category=Category.INSTANCE,
                    id=id_, name=name, state=State.RUNNING, raw=raw,
                    gpu=GpuSpec(model="NVIDIA L4", count=1))


@pytest.mark.parametrize(("host", "nodes", "expected"), [
    # node → providerID → instance id
    ("ip-10-0-1-23", [{"kind": "Node", "metadata": {"name": "ip-10-0-1-23.ec2.internal"},
                       "spec": {"providerID": "aws:///us-east-1a/i-0aaa1111bbbb2222c"}}],
     "i-0aaa1111bbbb2222c"),
    # no node: the EC2 private DNS name, or the IP it encodes
    ("ip-10-9-8-7.ec2.internal", [], "i-0ddd3333eeee4444f"),
    # a GCE internal host name: name + zone
    ("trainer.us-central1-a.c.proj.internal", [],
     "projects/proj/zones/us-central1-a/instances/trainer"),
    # Azure: the node's providerID; scale-set VMs join their scale set
    ("aks-gpu-0", [{"kind": "Node", "metadata": {"name": "aks-gpu-0"},
                    "spec": {"providerID": "azure:///subscriptions/s/resourceGroups/rg/providers/"
                             "Microsoft.Compute/virtualMachineScaleSets/gpu/virtualMachines/0"}}],
     "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/gpu"),
])
def test_hosts_join_cloud_instances(host: str, nodes: list[dict[str, Any]], expected: str
                                    ) -> None:
    scale_set = cloud("azure", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
                      "virtualMachineScaleSets/gpu", "gpu")
    scale_set = scale_set.model_copy(update={"category": Category.AUTOSCALING_GROUP})
    instances = [
        cloud("aws", "i-0aaa1111bbbb2222c", "a"),
        cloud("aws", "i-0ddd3333eeee4444f", "b", PrivateIpAddress="10.9.8.7"),
        cloud("gcp", "projects/proj/zones/us-central1-a/instances/trainer", "trainer"),
        scale_set,
    ]
    result = join_readings(instances, [reading(host=host)], catalog=CATALOG, objects=nodes)
    assert result.joins[0].targets == (expected,)
    assert not result.unowned


def test_planned_resources_never_take_readings() -> None:
    planned = cloud("aws", "i-0aaa1111bbbb2222c", "a").model_copy(
        update={"state": State.PLANNED})
    result = join_readings([planned], [reading(host="i-0aaa1111bbbb2222c.ec2.internal")],
                           catalog=CATALOG)
    assert result.joins[0].targets == () and len(result.unowned) == 1


# ---------------------------------------------------------------------------- summarizing


def test_summary_weights_by_samples_and_prefers_the_longest_window() -> None:
    readings = [
        reading(activity=10.0, samples=100),
        reading(activity=40.0, samples=50, gpu="1"),
        reading(activity=99.0, samples=1, gpu="2", window_seconds=0),  # an instant reading
        reading(activity=None, gpu="3", problem="NaN", memory_used_mib=20480.0),
    ]
    telemetry = summarize(readings)
    assert telemetry.average_activity_pct == pytest.approx(20.0)
    assert (telemetry.samples, telemetry.window_seconds) == (150, 3600)
    assert telemetry.peak_memory_gib == 20.0 and telemetry.reason is None


def test_summary_of_only_bad_readings_gives_the_reason() -> None:
    telemetry = summarize([reading(activity=None, problem="stale"),
                           reading(activity=None, problem="NaN", gpu="1")])
    assert telemetry.average_activity_pct is None and telemetry.samples == 0
    assert telemetry.reason == "stale (and 1 other problem(s))"


def test_joined_workloads_learn_model_and_peak_memory() -> None:
    unpinned = k8s("Deployment", "web")
    assert unpinned.gpu is not None and unpinned.gpu.model is None
    result = join_readings([unpinned], [reading("web-5f6d7c8b9-q2w3e", model="NVIDIA H200",
                                                memory_used_mib=9216.0)], catalog=CATALOG)
    gpu = result.resources[0].gpu
    assert gpu is not None
    assert (gpu.model, gpu.memory_gib, gpu.observed_peak_memory_gib) == \
        ("NVIDIA H200 141GB", 141.0, 9.0)


def test_an_outage_marks_running_gpu_resources_without_readings() -> None:
    web, cpu_only = k8s("Deployment", "web"), k8s("Deployment", "api", gpus=0)
    result = join_readings([web, cpu_only], [], catalog=CATALOG, outage="Prometheus is down")
    assert result.resources[0].telemetry is not None
    assert result.resources[0].telemetry.reason == "telemetry unavailable: Prometheus is down"
    assert result.resources[1].telemetry is None


# ---------------------------------------------------------------------------- unowned GPUs


def test_unowned_gpus_one_resource_per_gpu_priced_by_node() -> None:
    nodes = [{"kind": "Node", "metadata": {"name": "node-1", "labels": {
        "node.kubernetes.io/instance-type": "p5.48xlarge", "karpenter.sh/capacity-type": "spot",
        "topology.kubernetes.io/region": "us-west-2"}},
        "spec": {"providerID": "aws:///us-west-2b/i-0123456789abcdef0"}}]
    readings = [
        reading("gone-pod", activity=0.0, model="NVIDIA H100 80GB HBM3"),
        reading(None, activity=2.0, model="NVIDIA H100 80GB HBM3"),  # same GPU, later
        reading(None, gpu="1", activity=None, mig_profile="3g.40gb", mig_instance="2",
                model="NVIDIA H100 80GB HBM3", problem="stale series (stale series)"),
        reading(None, host="elsewhere", activity=0.0, mig_profile="1g.10gb", mig_instance="9",
                model="NVIDIA H100 80GB HBM3"),
    ]
    result = join_readings([], readings, catalog=CATALOG, objects=nodes, cluster="c1")
    by_id = {r.id: r for r in result.unowned}
    whole = by_id["node-1/GPU-node-1-0"]
    assert whole.provider == "telemetry" and whole.kind == "unowned_gpu"
    assert whole.category is Category.INSTANCE and whole.state is State.RUNNING
    assert (whole.capacity, whole.region, whole.cluster) == (Capacity.SPOT, "us-west-2", "c1")
    assert whole.hourly_usd == pytest.approx(55.04 / 8)
    assert whole.telemetry is not None and whole.telemetry.average_activity_pct == 1.0
    assert whole.raw["pods"] == ["ml/gone-pod"]
    mig = by_id["elsewhere/GPU-elsewhere-0/mig-9"]
    assert mig.gpu is not None and (mig.gpu.count, mig.gpu.mig_count) == (0.0, 1)
    assert mig.hourly_usd == pytest.approx(6.88 / 7)  # H100 catalog rate, one of 7 slices
    assert mig.capacity is Capacity.UNKNOWN and "capacity" in mig.unknown
    assert len(result.unowned) == 2  # the stale slice nobody owns is skipped
    assert result.warnings == ["telemetry: 1 stale GPU series with no owner skipped"]


def test_minimal_owner_keeps_only_what_the_chain_needs() -> None:
    full = {"kind": "Pod", "apiVersion": "v1", "metadata": {
        "name": "p", "namespace": "ml", "uid": "u", "labels": {"pod-template-hash": "h",
                                                               "app": "x"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r-h",
                             "uid": "u2", "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": "n", "containers": []}, "status": {"phase": "Running"}}
    assert minimal_owner(full) == {"kind": "Pod", "metadata": {
        "name": "p", "namespace": "ml", "labels": {"pod-template-hash": "h"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r-h",
                             "controller": True}]}, "spec": {"nodeName": "n"}}
