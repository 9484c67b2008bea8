"""JSONPatch builders: spot placement per cloud, MIG swap, `~1` escaping, idempotence (patches
applied with the `jsonpatch` package, then built again on their own output)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.model import Capacity
from engine.sources.kubernetes import (
    SPOT_LABELS,
    SPOT_TOLERATIONS,
    load_manifests,
    workload_resource,
)
from remediations.kubernetes_patch import (
    CLOUDS,
    escape_token,
    mig_swap_patch,
    pointer,
    spot_placement_patch,
)
from tests.conftest import REFERENCE

ADMISSION = REFERENCE / "admission"
MIG = "nvidia.com/mig-1g.10gb"


def reference_workloads() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in sorted(ADMISSION.glob("*.yaml")):
        objects.extend(load_manifests(path.read_text(), str(path)))
    return objects


def apply(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(obj, patch)
    return result


def gpu_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "1"}}}
            ],
            **spec,
        },
    }


def test_pointer_escapes_tilde_before_slash() -> None:
    assert escape_token("nvidia.com/gpu") == "nvidia.com~1gpu"
    assert escape_token("a~/b") == "a~0~1b"
    assert pointer(["spec", "nodeSelector", "karpenter.sh/capacity-type"]) == (
        "/spec/nodeSelector/karpenter.sh~1capacity-type"
    )
    assert pointer(["spec", "containers", 0]) == "/spec/containers/0"


@pytest.mark.parametrize("cloud", CLOUDS)
def test_spot_patch_on_every_reference_workload_pins_spot_and_is_idempotent(cloud: str) -> None:
    workloads = [o for o in reference_workloads() if workload_resource(o) is not None]
    assert len(workloads) >= 8
    for obj in workloads:
        before = copy.deepcopy(obj)
        patch = spot_placement_patch(obj, cloud)
        assert obj == before, "builders must not change their input"
        assert patch, obj["metadata"]["name"]
        patched = apply(obj, patch)
        resource = workload_resource(patched)
        assert resource is not None and resource.capacity is Capacity.SPOT
        assert spot_placement_patch(patched, cloud) == []


@pytest.mark.parametrize("cloud", CLOUDS)
def test_spot_patch_adds_the_label_and_the_cloud_toleration(cloud: str) -> None:
    patched = apply(gpu_pod(), spot_placement_patch(gpu_pod(), cloud))
    key, value = SPOT_LABELS[cloud]
    assert patched["spec"]["nodeSelector"] == {key: value}
    assert patched["spec"].get("tolerations", []) == [dict(t) for t in SPOT_TOLERATIONS[cloud]]


def test_spot_patch_escapes_the_label_key_inside_an_existing_selector() -> None:
    pod = gpu_pod(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    patch = spot_placement_patch(pod, "gke")
    assert patch[0] == {"op": "add", "path": "/spec/nodeSelector/cloud.google.com~1gke-spot",
                        "value": "true"}
    assert patch[1]["path"] == "/spec/tolerations"
    patched = apply(pod, patch)
    assert patched["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "cloud.google.com/gke-spot": "true"}


def test_spot_patch_replaces_an_on_demand_selector_value() -> None:
    pod = gpu_pod(nodeSelector={"karpenter.sh/capacity-type": "on-demand"})
    patched = apply(pod, spot_placement_patch(pod, "aws"))
    assert patched["spec"]["nodeSelector"] == {"karpenter.sh/capacity-type": "spot"}


def test_spot_patch_appends_to_existing_tolerations_and_keeps_wildcards() -> None:
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    pod = gpu_pod(tolerations=[gpu_toleration])
    patch = spot_placement_patch(pod, "azure")
    assert patch[-1]["path"] == "/spec/tolerations/-"
    assert apply(pod, patch)["spec"]["tolerations"] == [
        gpu_toleration, dict(SPOT_TOLERATIONS["azure"][0])]
    tolerate_all = gpu_pod(tolerations=[{"operator": "Exists"}])
    assert [op["path"] for op in spot_placement_patch(tolerate_all, "azure")] == [
        "/spec/nodeSelector"]


def test_spot_patch_for_controller_templates() -> None:
    cronjob = next(o for o in reference_workloads() if o["kind"] == "CronJob")
    patch = spot_placement_patch(cronjob, "eks")
    assert patch == [{"op": "add", "path": "/spec/jobTemplate/spec/template/spec/nodeSelector",
                      "value": {"eks.amazonaws.com/capacityType": "SPOT"}}]


def test_spot_patch_refuses_what_it_cannot_do_safely() -> None:
    on_demand_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}]}}}
    assert spot_placement_patch(gpu_pod(affinity=on_demand_affinity), "aws") == []
    assert spot_placement_patch(gpu_pod(nodeSelector=["not", "a", "map"]), "aws") == []
    assert spot_placement_patch(gpu_pod(tolerations="bad"), "gke") == []
    assert spot_placement_patch({"kind": "ConfigMap", "data": {}}, "aws") == []
    assert spot_placement_patch({"kind": "Pod"}, "aws") == []
    with pytest.raises(ValueError, match="unknown cloud"):
        spot_placement_patch(gpu_pod(), "oracle")


def test_spot_affinity_that_admits_spot_is_kept() -> None:
    either = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "karpenter.sh/capacity-type", "operator": "In",
             "values": ["spot", "on-demand"]}]}]}}}
    pod = gpu_pod(affinity=either)
    patched = apply(pod, spot_placement_patch(pod, "aws"))
    assert workload_resource(patched).capacity is Capacity.SPOT  # type: ignore[union-attr]


def test_mig_swap_replaces_whole_gpus_in_limits_and_requests() -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    pod["spec"]["initContainers"] = [{"name": "init", "image": "x", "resources": {
        "limits": {"nvidia.com/gpu": 2}}}]
    patch = mig_swap_patch(pod, MIG)
    assert {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu"} in patch
    assert {"op": "add", "path": "/spec/containers/0/resources/requests/nvidia.com~1mig-1g.10gb",
            "value": "1"} in patch
    patched = apply(pod, patch)
    assert patched["spec"]["containers"][0]["resources"] == {
        "limits": {MIG: 1}, "requests": {"cpu": "1", MIG: "1"}}
    assert patched["spec"]["initContainers"][0]["resources"]["limits"] == {MIG: 2}
    assert mig_swap_patch(patched, MIG) == []
    resource = workload_resource(patched)
    assert resource is not None and resource.gpu is not None
    assert (resource.gpu.count, resource.gpu.mig_profile, resource.gpu.mig_count) == (
        0, "1g.10gb", 2)


def test_mig_swap_on_reference_controllers_and_leaves_mixed_requests() -> None:
    for obj in reference_workloads():
        resource = workload_resource(obj)
        if resource is None or resource.gpu is None or not resource.gpu.count:
            assert mig_swap_patch(obj, MIG) == []
            continue
        patched = apply(obj, mig_swap_patch(obj, MIG))
        after = workload_resource(patched)
        assert after is not None and after.gpu is not None and after.gpu.count == 0
        assert mig_swap_patch(patched, MIG) == []
    mixed = gpu_pod()
    mixed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-2g.20gb"] = 1
    assert mig_swap_patch(mixed, MIG) == []
    with pytest.raises(ValueError, match="not a MIG resource"):
        mig_swap_patch(gpu_pod(), "nvidia.com/gpu")


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=8))
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "nvidia.com/gpu", "key", "operator"]), inner,
                      max_size=3),
    max_leaves=8,
)
_quantity = st.one_of(st.integers(0, 4), st.sampled_from(["1", "2", "0"]), _json_leaf)
_container = st.fixed_dictionaries(
    {"name": st.just("c")},
    optional={"resources": st.fixed_dictionaries(
        {}, optional={"limits": st.dictionaries(
            st.sampled_from(["nvidia.com/gpu", "cpu", "nvidia.com/mig-1g.10gb"]), _quantity,
            max_size=3),
            "requests": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "memory"]),
                                        _quantity, max_size=2)})},
)
_spec = st.fixed_dictionaries(
    {"containers": st.lists(_container, min_size=1, max_size=3)},
    optional={
        "nodeSelector": st.one_of(_json, st.dictionaries(
            st.sampled_from([*(k for k, _ in SPOT_LABELS.values()), "zone"]),
            st.sampled_from(["spot", "SPOT", "true", "on-demand"]), max_size=3)),
        "tolerations": st.one_of(_json, st.lists(st.fixed_dictionaries({}, optional={
            "key": st.sampled_from(["", "cloud.google.com/gke-spot",
                                    "kubernetes.azure.com/scalesetpriority"]),
            "operator": st.sampled_from(["Exists", "Equal"]),
            "value": st.sampled_from(["true", "spot"]),
            "effect": st.sampled_from(["NoSchedule", "NoExecute", ""])}), max_size=3)),
        "initContainers": st.lists(_container, max_size=2),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_spec, cloud=st.sampled_from(CLOUDS), kind=st.sampled_from(["Pod", "Deployment"]))
def test_fuzz_patches_apply_cleanly_and_are_idempotent(
    spec: dict[str, Any], cloud: str, kind: str
) -> None:
    obj: dict[str, Any] = {"kind": kind, "metadata": {"name": "x"}}
    if kind == "Pod":
        obj["spec"] = spec
    else:
        obj["spec"] = {"template": {"metadata": {}, "spec": spec}}
    def spot(o: dict[str, Any]) -> list[dict[str, Any]]:
        return spot_placement_patch(o, cloud)

    def mig(o: dict[str, Any]) -> list[dict[str, Any]]:
        return mig_swap_patch(o, MIG)

    for build in (spot, mig):
        patch = build(obj)
        patched = apply(obj, patch)
        assert build(patched) == []
        assert (patched != obj) == bool(patch)
