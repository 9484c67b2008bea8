"""Kubernetes adapter: real GPU manifests and admission objects, crafted cases, fuzz."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.catalog import Catalog, InstanceType, builtin_catalog
from engine.core.errors import InputError
from engine.core.model import Capacity, Category, Resource, State
from engine.sources.kubernetes import (
    SPOT_LABELS,
    SPOT_TOLERATIONS,
    declared_memory_gib,
    load_manifests,
    namespace_resource,
    parse_quantity,
    pod_template_path,
    workload_resource,
)
from tests.conftest import REFERENCE

ADMISSION = REFERENCE / "admission"


def manifests(name: str) -> dict[str, dict[str, Any]]:
    path = ADMISSION / name
    return {obj["metadata"]["name"]: obj for obj in load_manifests(path.read_text(), str(path))}


def admission_object(name: str, key: str = "object") -> dict[str, Any]:
    body = json.loads((ADMISSION / name).read_text())
    request = body.get("request", body)  # bare AdmissionRequest or full AdmissionReview
    obj: dict[str, Any] = request[key]
    return obj


def normalize(obj: dict[str, Any], **kwargs: Any) -> Resource:
    resource = workload_resource(obj, **kwargs)
    assert resource is not None
    return resource


def gpu_count(obj: dict[str, Any]) -> float | None:
    resource = normalize(obj)
    return None if resource.gpu is None else resource.gpu.count


def pod(
    *,
    limits: dict[str, Any] | None = None,
    containers: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    if containers is None:
        containers = [{"name": "main", "image": "cuda", "resources": {"limits": limits or {}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"containers": containers, **spec},
    }


def gpu_pod(**spec: Any) -> dict[str, Any]:
    return pod(limits={"nvidia.com/gpu": 1}, **spec)


def container(name: str, gpus: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {"nvidia.com/gpu": gpus}}, **extra}


def required_affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": term} for term in terms]
            }
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


# --------------------------------------------------------------------- real manifests


def test_kyverno_gpu_pods_count_int_zero_as_no_gpu_and_cpu_only_as_no_gpu() -> None:
    good = manifests("kyverno-gpu-pods-good.yaml")
    assert set(good) == {"goodpod01", "goodpod02", "goodpod03"}
    for name, obj in good.items():
        resource = normalize(obj)
        assert resource.gpu is None, name
        assert not resource.has_gpu
        assert resource.id == f"Pod/nvidia-gpu-ns/{name}"
    # goodpod03 asks for `nvidia.com/gpu: 0` (an int) in one of two containers.
    goodpod03 = good["goodpod03"]["spec"]["containers"][0]
    assert goodpod03["resources"]["limits"]["nvidia.com/gpu"] == 0


def test_kyverno_gpu_pods_sum_gpus_over_containers() -> None:
    bad = manifests("kyverno-gpu-pods-bad.yaml")
    assert gpu_count(bad["badpod01"]) == 1
    assert gpu_count(bad["badpod02"]) == 2  # two containers with one GPU each
    resource = normalize(bad["badpod02"])
    assert resource.provider == "kubernetes"
    assert resource.category is Category.WORKLOAD
    assert resource.kind == "Pod"
    assert resource.namespace == "nvidia-gpu-ns"
    assert resource.tags == {"run": "busybox"}
    assert resource.has_gpu
    assert resource.capacity is Capacity.ON_DEMAND  # nothing pins it to spot
    assert resource.raw == bad["badpod02"]


def test_kyverno_pod_without_namespace_lands_in_default() -> None:
    (obj,) = manifests("kyverno-gpu-pod-bad01.yaml").values()
    resource = normalize(obj)
    assert resource.id == "Pod/default/badpod01"
    assert resource.namespace == "default"
    assert resource.gpu is not None and resource.gpu.count == 1


def test_kyverno_controllers_deployment_replicas_and_cronjob_template() -> None:
    bad = manifests("kyverno-gpu-podcontrollers-bad.yaml")
    deployment = normalize(bad["baddeployment01"])
    assert deployment.id == "Deployment/nvidia-gpu-ns/baddeployment01"
    assert deployment.count == 1
    assert deployment.gpu is not None and deployment.gpu.count == 2
    assert deployment.tags == {"app": "busybox"}
    cronjob = normalize(bad["badcronjob01"])
    assert cronjob.id == "CronJob/nvidia-gpu-ns/badcronjob01"
    assert cronjob.gpu is not None and cronjob.gpu.count == 2

    good = manifests("kyverno-gpu-podcontrollers-good.yaml")
    assert gpu_count(good["gooddeployment01"]) == 1  # second container has no resources
    assert gpu_count(good["goodcronjob01"]) == 1


def test_replica_count_follows_the_deployment() -> None:
    obj = copy.deepcopy(manifests("kyverno-gpu-podcontrollers-bad.yaml")["baddeployment01"])
    obj["spec"]["replicas"] = 4
    resource = normalize(obj)
    assert resource.count == 4
    assert resource.gpu is not None and resource.gpu.count == 2  # per replica


def test_nvidia_device_plugin_job_string_quantity() -> None:
    (obj,) = manifests("nvidia-device-plugin-gpu-job.yaml").values()
    limits = obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    resource = normalize(obj, state=State.PLANNED, cluster="kind")
    assert resource.id == "Job/default/j-e2e-1"
    assert resource.gpu is not None and resource.gpu.count == 1.0
    assert resource.tags == {"app.nvidia.com": "k8s-device-plugin-test-app"}
    assert resource.state is State.PLANNED
    assert resource.cluster == "kind"
    assert resource.count == 1


def test_kubewarden_deployment_scaled_to_zero_has_template_labels() -> None:
    resource = normalize(admission_object("kw-deployment-create-limits.json"))
    assert resource.id == "Deployment/default/nginx"
    assert resource.count == 0  # replicas: 0 in the captured object
    assert resource.gpu is None  # cpu/memory limits only
    assert resource.tags == {"app": "nginx"}  # from the pod template
    assert "io.kubewarden.policy.echo.create" in resource.annotations


def test_kubewarden_job_and_cronjob() -> None:
    job = normalize(admission_object("kw-job-create.json"))
    assert job.id == "Job/default/pi"
    assert job.tags["job-name"] == "pi"
    assert job.count == 1
    cronjob = normalize(admission_object("kw-cronjob-create.json"))
    assert cronjob.id == "CronJob/default/hello"
    assert pod_template_path(admission_object("kw-cronjob-create.json")) == (
        "spec",
        "jobTemplate",
        "spec",
        "template",
        "spec",
    )


def test_kubewarden_pods_and_full_review() -> None:
    pod_obj = normalize(admission_object("kw-pod-create-resources-within-range.json"))
    assert pod_obj.tags == {"owner": "team-alpha", "cc-center": "123"}
    assert pod_obj.gpu is None
    review_pod = normalize(admission_object("kw-review-pod-create.json"))
    assert review_pod.id == "Pod/default/flexvolume-test"  # no namespace in the object
    review_deployment = normalize(admission_object("kw-review-deployment-create.json"))
    assert review_deployment.count == 1
    deleted = admission_object("kw-pod-delete.json", key="oldObject")
    assert normalize(deleted).tags == {"env": "test"}


# --------------------------------------------------------------------- capacity

SPOT_SELECTORS = [
    ("karpenter.sh/capacity-type", "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
]
ON_DEMAND_SELECTORS = [
    ("karpenter.sh/capacity-type", "on-demand"),
    ("eks.amazonaws.com/capacityType", "ON_DEMAND"),
    ("kubernetes.azure.com/scalesetpriority", "regular"),
    ("node.kubernetes.io/instance-type", "p4d.24xlarge"),
]


@pytest.mark.parametrize(("key", "value"), SPOT_SELECTORS)
def test_spot_via_node_selector(key: str, value: str) -> None:
    assert normalize(gpu_pod(nodeSelector={key: value})).capacity is Capacity.SPOT


@pytest.mark.parametrize(("key", "value"), SPOT_SELECTORS)
def test_spot_via_required_affinity(key: str, value: str) -> None:
    affinity = required_affinity([expr(key, "In", value)])
    assert normalize(gpu_pod(affinity=affinity)).capacity is Capacity.SPOT


@pytest.mark.parametrize(("key", "value"), SPOT_SELECTORS)
def test_preferred_affinity_does_not_pin_spot(key: str, value: str) -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [expr(key, "In", value)]}}
            ]
        }
    }
    assert normalize(gpu_pod(affinity=affinity)).capacity is Capacity.ON_DEMAND


@pytest.mark.parametrize(("key", "value"), ON_DEMAND_SELECTORS)
def test_on_demand_values_and_other_labels(key: str, value: str) -> None:
    assert normalize(gpu_pod(nodeSelector={key: value})).capacity is Capacity.ON_DEMAND
    affinity = required_affinity([expr(key, "In", value)])
    assert normalize(gpu_pod(affinity=affinity)).capacity is Capacity.ON_DEMAND


@pytest.mark.parametrize(
    ("key", "spot"),
    [
        ("cloud.google.com/gke-spot", True),
        ("cloud.google.com/gke-preemptible", True),
        ("kubernetes.azure.com/scalesetpriority", True),
        # on-demand nodes carry these labels too, so Exists says nothing
        ("karpenter.sh/capacity-type", False),
        ("eks.amazonaws.com/capacityType", False),
    ],
)
def test_exists_counts_only_for_labels_spot_nodes_alone_carry(key: str, spot: bool) -> None:
    affinity = required_affinity([expr(key, "Exists")])
    expected = Capacity.SPOT if spot else Capacity.ON_DEMAND
    assert normalize(gpu_pod(affinity=affinity)).capacity is expected


def test_affinity_terms_are_alternatives() -> None:
    spot = expr("karpenter.sh/capacity-type", "In", "spot")
    either = expr("karpenter.sh/capacity-type", "In", "spot", "on-demand")
    zone = expr("topology.kubernetes.io/zone", "In", "us-east-1a")
    assert normalize(gpu_pod(affinity=required_affinity([either]))).capacity is Capacity.ON_DEMAND
    # one term could land on on-demand nodes
    one_open = required_affinity([spot], [zone])
    assert normalize(gpu_pod(affinity=one_open)).capacity is Capacity.ON_DEMAND
    both = required_affinity([spot, zone], [zone, spot])
    assert normalize(gpu_pod(affinity=both)).capacity is Capacity.SPOT
    # a nodeSelector holds in every term
    selector = {"cloud.google.com/gke-spot": "true"}
    mixed = gpu_pod(nodeSelector=selector, affinity=required_affinity([zone]))
    assert normalize(mixed).capacity is Capacity.SPOT


def test_node_capacity_overrides_selectors() -> None:
    obj = gpu_pod(nodeSelector={"karpenter.sh/capacity-type": "spot"})
    assert normalize(obj, node_capacity=Capacity.ON_DEMAND).capacity is Capacity.ON_DEMAND
    assert normalize(gpu_pod(), node_capacity=Capacity.SPOT).capacity is Capacity.SPOT


@pytest.mark.parametrize("cloud", sorted(SPOT_LABELS))
def test_spot_labels_table_is_recognized_and_tolerations_match(cloud: str) -> None:
    key, value = SPOT_LABELS[cloud]
    tolerations = list(SPOT_TOLERATIONS[cloud])
    obj = gpu_pod(nodeSelector={key: value}, tolerations=tolerations)
    assert normalize(obj).capacity is Capacity.SPOT
    for toleration in tolerations:
        assert (toleration["key"], toleration["value"]) == (key, value)
        assert toleration["effect"] == "NoSchedule"


def test_spot_tolerations_for_tainted_clouds() -> None:
    assert set(SPOT_LABELS) == {"aws", "eks", "gke", "azure"}
    assert [t["key"] for t in SPOT_TOLERATIONS["azure"]] == [
        "kubernetes.azure.com/scalesetpriority"
    ]
    assert [t["key"] for t in SPOT_TOLERATIONS["gke"]] == ["cloud.google.com/gke-spot"]


# --------------------------------------------------------------------- GPU requests


def test_mig_resources() -> None:
    resource = normalize(pod(limits={"nvidia.com/mig-1g.10gb": "2"}))
    assert resource.gpu is not None
    assert (resource.gpu.mig_profile, resource.gpu.mig_count, resource.gpu.count) == (
        "1g.10gb",
        2,
        0,
    )
    assert resource.has_gpu
    mixed = pod(
        containers=[
            {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}},
            {"name": "b", "resources": {"requests": {"nvidia.com/mig-3g.40gb": 1}}},
        ]
    )
    gpu = normalize(mixed).gpu
    assert gpu is not None
    assert (gpu.mig_profile, gpu.mig_count) == ("3g.40gb", 2)  # the largest slice names it


def test_mig_single_strategy_product_label() -> None:
    obj = gpu_pod(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"})
    gpu = normalize(obj).gpu
    assert gpu is not None
    assert (gpu.count, gpu.mig_profile, gpu.mig_count) == (0, "1g.5gb", 1)
    assert gpu.model == "NVIDIA A100 40GB SXM"


@pytest.mark.parametrize(
    ("init", "regular", "expected"),
    [
        ([container("warm", 4)], [container("a", 1), container("b", 1)], 4),
        ([container("warm", 1)], [container("a", 2), container("b", 1)], 3),
        ([container("w1", 2), container("w2", "3")], [container("a", 1)], 3),
        # a sidecar (restartable init container) runs beside the later init containers and the app
        ([container("side", 1, restartPolicy="Always"), container("w", 3)], [container("a", 1)], 4),
        ([container("w", 3), container("side", 1, restartPolicy="Always")], [container("a", 1)], 3),
        ([container("side", 1, restartPolicy="Always")], [container("a", 2)], 3),
    ],
)
def test_init_containers(
    init: list[dict[str, Any]], regular: list[dict[str, Any]], expected: int
) -> None:
    assert gpu_count(pod(containers=regular, initContainers=init)) == expected


def test_limits_win_over_requests_and_requests_alone_count() -> None:
    both = {"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 1}}
    assert gpu_count(pod(containers=[{"name": "a", "resources": both}])) == 2
    only = {"requests": {"nvidia.com/gpu": "3"}}
    assert gpu_count(pod(containers=[{"name": "a", "resources": only}])) == 3


@pytest.mark.parametrize("bad", ["one", "1.5", "500m", -1, True, [1], {"n": 1}, "1 GPU", 1.5])
def test_malformed_gpu_quantity_is_unknown(bad: Any) -> None:
    obj = pod(containers=[container("a", bad), container("b", 1)])
    resource = normalize(obj)
    assert resource.is_unknown("gpu")
    assert resource.is_unknown("gpu.count")
    assert resource.gpu is not None and resource.gpu.count is None


@pytest.mark.parametrize(("good", "count"), [(2, 2), ("2", 2), (2.0, 2), ("1e1", 10), ("2000m", 2)])
def test_valid_gpu_quantities(good: Any, count: int) -> None:
    resource = normalize(pod(limits={"nvidia.com/gpu": good}))
    assert resource.unknown == frozenset()
    assert resource.gpu is not None and resource.gpu.count == count


def test_parse_quantity_suffixes() -> None:
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("2k") == 2000
    assert parse_quantity("1e3") == 1000
    assert parse_quantity("1E") == 1e18  # exa, not an exponent
    assert parse_quantity("abc") is None
    assert parse_quantity(False) is None
    assert parse_quantity(10**400) is None


@pytest.mark.parametrize(
    ("text", "gib"),
    [
        ("12Gi", 12.0),
        ("12GiB", 12.0),
        ("12gib", 12.0),
        ("12", 12.0),
        ("12000Mi", 12000 / 1024),
        ("12G", 12e9 / 2**30),
        ("12GB", 12e9 / 2**30),
        ("1Ti", 1024.0),
        ("0.5Gi", 0.5),
    ],
)
def test_declared_gpu_memory(text: str, gib: float) -> None:
    value, known = declared_memory_gib(text)
    assert known and value == pytest.approx(gib)
    obj = gpu_pod()
    obj["metadata"]["annotations"] = {"gpuwarden.io/gpu-memory": text}
    gpu = normalize(obj).gpu
    assert gpu is not None and gpu.declared_memory_gib == pytest.approx(gib)


@pytest.mark.parametrize("text", ["twelve", "12 parsecs", "-12Gi", "0", "12B", "Gi", ""])
def test_malformed_declared_gpu_memory_is_unknown(text: str) -> None:
    obj = gpu_pod()
    obj["metadata"]["annotations"] = {"gpuwarden.io/gpu-memory": text}
    resource = normalize(obj)
    assert resource.is_unknown("gpu.declared_memory_gib")
    assert not resource.is_unknown("gpu.count")
    assert resource.gpu is not None and resource.gpu.declared_memory_gib is None


def test_declared_memory_from_pod_template_annotation() -> None:
    deployment = manifests("kyverno-gpu-podcontrollers-good.yaml")["gooddeployment01"]
    deployment = copy.deepcopy(deployment)
    deployment["spec"]["template"]["metadata"]["annotations"] = {"gpuwarden.io/gpu-memory": "6Gi"}
    gpu = normalize(deployment).gpu
    assert gpu is not None and gpu.declared_memory_gib == 6.0


# --------------------------------------------------------------------- GPU model


def test_gpu_product_maps_to_catalog_model_and_mig_family() -> None:
    catalog = builtin_catalog()
    obj = gpu_pod(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    gpu = normalize(obj, catalog=catalog).gpu
    assert gpu is not None
    assert gpu.model == "NVIDIA A100 80GB SXM"
    assert gpu.memory_gib == 80
    assert catalog.mig_family(gpu.model, gpu.memory_gib) == "A100 80GB"


@pytest.mark.parametrize(
    ("product", "model", "memory"),
    [
        ("NVIDIA-A100-SXM4-40GB", "NVIDIA A100 40GB SXM", 40),
        ("NVIDIA-A100-PCIE-40GB", "NVIDIA A100 40GB", 40),  # not the SXM part
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB", 80),
        ("NVIDIA-H200", "NVIDIA H200 141GB", 141),
        ("Tesla-T4", "NVIDIA T4", 16),
        ("NVIDIA-A10G", "NVIDIA A10G", 24),  # not the A10
        ("NVIDIA-GeForce-RTX-4090", "NVIDIA-GeForce-RTX-4090", None),  # not in the catalog
        ("NVIDIA-Future-X9-96GB", "NVIDIA-Future-X9-96GB", 96),
    ],
)
def test_gpu_product_via_required_affinity(product: str, model: str, memory: float | None) -> None:
    affinity = required_affinity([expr("nvidia.com/gpu.product", "In", product)])
    gpu = normalize(gpu_pod(affinity=affinity)).gpu
    assert gpu is not None
    assert (gpu.model, gpu.memory_gib) == (model, memory)


def test_gpu_product_not_pinned() -> None:
    two = required_affinity([expr("nvidia.com/gpu.product", "In", "Tesla-T4", "NVIDIA-L4")])
    preferred = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [expr("nvidia.com/gpu.product", "In", "Tesla-T4")]
                    },
                }
            ]
        }
    }
    zone = expr("topology.kubernetes.io/zone", "In", "us-east-1a")
    one_term_open = required_affinity([expr("nvidia.com/gpu.product", "In", "Tesla-T4")], [zone])
    for affinity in (two, preferred, one_term_open):
        gpu = normalize(gpu_pod(affinity=affinity)).gpu
        assert gpu is not None and gpu.model is None


def test_gpu_memory_label_and_custom_catalog() -> None:
    obj = gpu_pod(
        nodeSelector={"nvidia.com/gpu.product": "Acme-Z1", "nvidia.com/gpu.memory": "81920"}
    )
    gpu = normalize(obj).gpu
    assert gpu is not None and (gpu.model, gpu.memory_gib) == ("Acme-Z1", 80.0)
    base = builtin_catalog()
    z1 = InstanceType("aws", "z1.big", "NVIDIA Z1", 8, 64.0, 10.0, "us-east-1", "test")
    catalog = Catalog({"z1.big": z1}, {}, base.mig_profiles, base.spot_discounts)
    obj = gpu_pod(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-Z1"})
    gpu = normalize(obj, catalog=catalog).gpu
    assert gpu is not None and (gpu.model, gpu.memory_gib) == ("NVIDIA Z1", 64.0)


# --------------------------------------------------------------------- labels, ids, counts


def test_label_and_annotation_precedence_workload_first() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "team-a",
            "labels": {"team": "from-workload", "env": "dev"},
            "annotations": {"note": "workload"},
        },
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {
                    "labels": {"team": "from-template", "project": "llm", "gpu": 1},
                    "annotations": {"note": "template", "extra": "yes"},
                },
                "spec": {"containers": [container("a", 1)]},
            },
        },
    }
    namespace = {"team": "from-namespace", "cost-center": "42"}
    resource = normalize(deployment, namespace_labels=namespace)
    assert resource.tags == {"team": "from-workload", "env": "dev", "project": "llm", "gpu": "1"}
    assert resource.annotations == {"note": "workload", "extra": "yes"}
    # namespace labels are the fallback the engine consults, kept apart from the workload's own
    assert resource.namespace_labels == namespace
    assert resource.namespace_labels is not namespace
    assert "cost-center" not in resource.tags
    assert normalize(deployment).namespace_labels == {}


def test_namespace_resource_for_the_cache() -> None:
    obj = {"kind": "Namespace", "metadata": {"name": "ml", "labels": {"env": "prod"}}}
    name, labels = namespace_resource(obj)
    resource = normalize(gpu_pod(), namespace_labels=labels)
    assert (name, resource.namespace_labels) == ("ml", {"env": "prod"})
    with pytest.raises(InputError):
        namespace_resource({"kind": "Pod", "metadata": {"name": "x"}})
    with pytest.raises(InputError):
        namespace_resource({"kind": "Namespace", "metadata": {}})


@pytest.mark.parametrize(
    ("obj", "expected_id", "count"),
    [
        ({"kind": "Pod", "metadata": {"name": "p", "namespace": "n"}, "spec": {}}, "Pod/n/p", 1),
        ({"kind": "Pod", "metadata": {"generateName": "job-"}, "spec": {}}, "Pod/default/job-", 1),
        (
            {"kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {"template": {"spec": {}}}},
            "StatefulSet/default/s",
            1,
        ),
        (
            {
                "kind": "ReplicaSet",
                "metadata": {"name": "r", "namespace": "x"},
                "spec": {"replicas": 5, "template": {"spec": {}}},
            },
            "ReplicaSet/x/r",
            5,
        ),
        (
            {"kind": "DaemonSet", "metadata": {"name": "d"}, "spec": {"template": {"spec": {}}}},
            "DaemonSet/default/d",
            1,
        ),
        (
            {
                "kind": "Job",
                "metadata": {"name": "j"},
                "spec": {"parallelism": 4, "completions": 2, "template": {"spec": {}}},
            },
            "Job/default/j",
            2,
        ),
        (
            {
                "kind": "CronJob",
                "metadata": {"name": "c"},
                "spec": {"jobTemplate": {"spec": {"parallelism": 3, "template": {"spec": {}}}}},
            },
            "CronJob/default/c",
            3,
        ),
        (
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Rollout",
                "metadata": {"name": "ro", "namespace": "web"},
                "spec": {"replicas": 9, "template": {"spec": {"containers": []}}},
            },
            "Rollout/web/ro",
            1,
        ),
    ],
)
def test_ids_and_counts(obj: dict[str, Any], expected_id: str, count: int) -> None:
    resource = normalize(obj)
    assert (resource.id, resource.count) == (expected_id, count)


@pytest.mark.parametrize(
    "obj",
    [
        {"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": []}},
        {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}},
        {"kind": "Namespace", "metadata": {"name": "n"}},
        {"kind": "Deployment", "metadata": {"name": "broken"}, "spec": {"template": "x"}},
        {"kind": "Widget", "spec": {"template": {"spec": {"containers": "nope"}}}},
        {"metadata": {"name": "no-kind"}, "spec": {"containers": []}},
    ],
)
def test_non_workloads_are_none(obj: dict[str, Any]) -> None:
    assert workload_resource(obj) is None


def test_unreadable_replicas_mark_count_unknown() -> None:
    obj = {
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": "3", "template": {"spec": {}}},
    }
    resource = normalize(obj)
    assert resource.is_unknown("count")
    assert resource.count == 1


def test_owner_is_the_controller_reference() -> None:
    obj = gpu_pod()
    obj["metadata"]["ownerReferences"] = [
        {"kind": "Node", "name": "n1"},
        {"kind": "ReplicaSet", "name": "web-5d8f", "controller": True},
    ]
    assert normalize(obj).owner == "ReplicaSet/web-5d8f"
    assert normalize(gpu_pod()).owner is None


def test_not_a_mapping_is_input_error() -> None:
    with pytest.raises(InputError):
        workload_resource(["kind", "Pod"])  # type: ignore[arg-type]


# --------------------------------------------------------------------- load_manifests


def test_load_manifests_multi_document_and_lists() -> None:
    text = """
---
kind: List
apiVersion: v1
items:
  - kind: Pod
    metadata: {name: a}
  - kind: List
    items:
      - {kind: Pod, metadata: {name: b}}
---
apiVersion: apps/v1
kind: DeploymentList
items:
  - metadata: {name: c}
---
{"kind": "Pod", "metadata": {"name": "d"}}
"""
    objects = load_manifests(text, "x.yaml")
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Pod", "a"),
        ("Pod", "b"),
        ("Deployment", "c"),
        ("Pod", "d"),
    ]
    assert objects[2]["apiVersion"] == "apps/v1"


def test_load_manifests_errors_name_file_and_line() -> None:
    with pytest.raises(InputError) as caught:
        load_manifests("kind: Pod\nmetadata:\n  name: [a\n", "bad.yaml")
    assert caught.value.file == "bad.yaml"
    assert caught.value.line is not None and caught.value.line >= 3
    assert str(caught.value).startswith("bad.yaml:")
    with pytest.raises(InputError) as caught:
        load_manifests("kind: Pod\n---\n- 1\n- 2\n", "list.yaml")
    assert (caught.value.file, caught.value.line) == ("list.yaml", 3)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_load_manifests_only_raises_input_error(text: str) -> None:
    try:
        objects = load_manifests(text, "fuzz.yaml")
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(isinstance(obj, dict) for obj in objects)


# --------------------------------------------------------------------- fuzz

JUNK = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
# Values and keys a GPU pod really uses, mixed with junk so every branch sees both.
QUANTITY = st.sampled_from([0, 1, 2, "1", "2", "8", "-1", "1.5", "500m", "2000m", "1e1"]) | JUNK
RESOURCE_NAME = st.sampled_from(
    ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-", "cpu"]
) | st.text(max_size=4)
NODE_LABEL = st.sampled_from(
    [*(key for key, _ in SPOT_SELECTORS), "nvidia.com/gpu.product", "nvidia.com/gpu.memory"]
)
LABEL_VALUE = (
    st.sampled_from(
        [
            *("spot", "SPOT", "true", "on-demand", "Tesla-T4", "81920", "12Gi", "12G", "x"),
            *("NVIDIA-A100-SXM4-80GB", "NVIDIA-H200-MIG-1g.18gb"),
        ]
    )
    | JUNK
)
META_KEY = st.sampled_from(["gpuwarden.io/gpu-memory", "team", "env"]) | st.text(max_size=4)
ANY = st.recursive(
    JUNK | LABEL_VALUE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(META_KEY, inner, max_size=3),
    max_leaves=12,
)


def loosely(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the expected shape, sometimes anything at all."""
    return st.integers(0, 9).flatmap(lambda roll: ANY if roll == 0 else shape)


def optional_dict(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


QUANTITIES = loosely(st.dictionaries(RESOURCE_NAME, QUANTITY, max_size=3))
CONTAINER = optional_dict(
    name=JUNK,
    resources=loosely(optional_dict(limits=QUANTITIES, requests=QUANTITIES)),
    restartPolicy=st.just("Always") | JUNK,
)
EXPRESSION = optional_dict(
    key=loosely(NODE_LABEL),
    operator=loosely(st.sampled_from(["In", "Exists", "NotIn"])),
    values=loosely(st.lists(LABEL_VALUE, max_size=3)),
)
TERM = optional_dict(matchExpressions=loosely(st.lists(EXPRESSION, max_size=3)))
REQUIRED = optional_dict(nodeSelectorTerms=loosely(st.lists(loosely(TERM), max_size=3)))
AFFINITY = optional_dict(
    nodeAffinity=loosely(
        optional_dict(requiredDuringSchedulingIgnoredDuringExecution=loosely(REQUIRED))
    )
)
POD_SPEC = optional_dict(
    containers=loosely(st.lists(loosely(CONTAINER), min_size=1, max_size=3)),
    initContainers=loosely(st.lists(loosely(CONTAINER), max_size=2)),
    nodeSelector=loosely(st.dictionaries(NODE_LABEL, LABEL_VALUE, max_size=3)),
    affinity=loosely(AFFINITY),
)
STRING_MAP = loosely(st.dictionaries(META_KEY, LABEL_VALUE, max_size=3))
METADATA = optional_dict(
    name=JUNK,
    namespace=JUNK,
    generateName=JUNK,
    labels=STRING_MAP,
    annotations=STRING_MAP,
    ownerReferences=loosely(st.lists(optional_dict(kind=JUNK, name=JUNK, controller=JUNK))),
)
TEMPLATE = st.fixed_dictionaries(
    {"spec": loosely(POD_SPEC)}, optional={"metadata": loosely(METADATA)}
)
JOB_SPEC = st.fixed_dictionaries(
    {"template": loosely(TEMPLATE)}, optional={"parallelism": QUANTITY, "completions": QUANTITY}
)
CONTROLLER_SPEC = st.fixed_dictionaries(
    {
        "template": loosely(TEMPLATE),
        "jobTemplate": loosely(st.fixed_dictionaries({"spec": JOB_SPEC})),
    },
    optional={"replicas": QUANTITY},
)
SPEC = st.tuples(POD_SPEC, CONTROLLER_SPEC).map(lambda parts: {**parts[0], **parts[1]})
KIND = st.sampled_from(
    ["Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Widget"]
)
OBJECT = st.tuples(
    st.fixed_dictionaries(
        {"kind": loosely(KIND), "spec": loosely(SPEC)}, optional={"metadata": loosely(METADATA)}
    ),
    st.dictionaries(st.integers() | st.text(max_size=3), JUNK, max_size=2),
).map(lambda parts: {**parts[1], **parts[0]})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OBJECT, STRING_MAP)
def test_workload_resource_never_crashes(obj: dict[Any, Any], namespace_labels: Any) -> None:
    try:
        resource = workload_resource(obj, namespace_labels)
    except InputError:
        return
    if resource is None:
        return
    assert isinstance(resource, Resource)
    assert resource.id.startswith(f"{obj['kind']}/{resource.namespace}/")
    assert resource.count >= 0
    if resource.gpu is not None and resource.gpu.count is not None:
        assert resource.gpu.count >= 0 and resource.gpu.count.is_integer()
    assert all(isinstance(v, str) for v in resource.tags.values())
    resource.model_dump_json(exclude={"raw"})
