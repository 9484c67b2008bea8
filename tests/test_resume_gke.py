"""GKE node pools, live: the scan lists clusters and pools (the container API and the pools'
instance groups of the loopback server of tests/test_gcp_source.py, extended by
tests/gke_fake.py), enforcement at 22:00 UTC on a weekday scales the non-production GPU pools to
zero with their marks and size in resource labels, and enforcement at 08:00 the next weekday
restores exactly those; a pool scaled to zero by hand stays at zero; dry-run sends no mutation."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.model import Capacity, Category, State
from engine.sources.gcp import container_api
from engine.sources.snapshot import load_snapshot_resources
from remediations.gcp_actions import escaped_schedule
from remediations.gke_actions import PREVIOUS_SIZE_LABEL, PoolSize, parse_size
from remediations.planning import RESUME_SCHEDULE_LABEL, STOPPED_BY_LABEL
from tests import test_gcp_source as gcp_tests
from tests.gke_fake import GkeState, add_cluster
from tests.test_gcp_source import FakeGcp, audit_lines, collect_live, scan

fake_gcp = gcp_tests.fake_gcp  # the loopback Compute Engine, Resource Manager and GKE APIs

EVENING = datetime.fromisoformat("2026-12-01T22:00:00+00:00")  # a Tuesday: off-hours
MORNING = datetime.fromisoformat("2026-12-02T08:00:00+00:00")  # the next weekday: on-hours
TRAIN = "projects/ml-dev/locations/us-central1/clusters/train/nodePools"
SCALED = {"l4-pool": [2, 2], "t4-spot": [1, 1]}  # the pools off-hours scales, nodes per zone
MARKS = {STOPPED_BY_LABEL, RESUME_SCHEDULE_LABEL, PREVIOUS_SIZE_LABEL}
L4_AUTOSCALING = {"enabled": True, "minNodeCount": 1, "maxNodeCount": 4}


def gke_estate(state: GkeState) -> None:
    add_cluster(state, "ml-dev", "train", "us-central1", ["us-central1-a", "us-central1-c"], [
        {"name": "l4-pool", "nodes": 2, "initialNodeCount": 1, "autoscaling": L4_AUTOSCALING,
         "config": {"machineType": "g2-standard-8", "labels": {"workload": "train"},
                    "resourceLabels": {"project": "llm"}}},
        {"name": "t4-spot", "nodes": 1, "initialNodeCount": 1, "config": {
            "machineType": "n1-standard-8", "spot": True, "accelerators": [
                {"acceleratorCount": "2", "acceleratorType": "nvidia-tesla-t4"}]}},
        {"name": "a100-idle", "nodes": 0, "initialNodeCount": 1,
         "config": {"machineType": "a2-highgpu-1g"}},  # scaled to zero by hand
        {"name": "cpu", "nodes": 3, "initialNodeCount": 3,
         "config": {"machineType": "e2-standard-4"}},
    ], labels={"team": "ml", "cost-center": "cc-4711"})
    add_cluster(state, "ml-dev", "auto", "europe-west4", ["europe-west4-a"], [
        {"name": "nap-l4", "nodes": 1, "initialNodeCount": 1,
         "config": {"machineType": "g2-standard-4"}}], autopilot=True)
    add_cluster(state, "ml-prod", "serve", "us-east1-b", ["us-east1-b"], [
        {"name": "a100-serve", "nodes": 1, "initialNodeCount": 1,
         "config": {"machineType": "a2-highgpu-1g"}}])


@pytest.fixture
def gke(fake_gcp: FakeGcp, monkeypatch: pytest.MonkeyPatch) -> FakeGcp:
    gke_estate(fake_gcp.gke)
    monkeypatch.setattr(container_api, "OPERATION_POLL_S", 0.0)
    return fake_gcp


def pool(api: FakeGcp, name: str, project: str = "ml-dev") -> dict[str, Any]:
    location, cluster = ("us-central1", "train") if project == "ml-dev" else ("us-east1-b",
                                                                              "serve")
    found = api.gke.pool(project, location, cluster, name)
    assert found is not None
    return found


def labels(api: FakeGcp, name: str) -> dict[str, str]:
    return dict(pool(api, name)["config"].get("resourceLabels") or {})


def by_action(report: dict[str, Any], action: str) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"].rsplit("/", 1)[-1]: f["remediation"] for f in report["findings"]
            if (f.get("remediation") or {}).get("action") == action
            and f["resource"]["kind"] == "google_container_node_pool"}


def gke_mutations(api: FakeGcp) -> list[str]:
    return [f"{r.method} {r.path.rsplit('/', 1)[-1]}" for r in api.mutations()
            if r.path.startswith("/v1/")]


def test_a_scan_lists_node_pools_like_the_terraform_adapter(gke: FakeGcp) -> None:
    collected = collect_live(gke)
    pools = {r.name: r for r in collected.resources if r.kind == "google_container_node_pool"}
    assert set(pools) == {"l4-pool", "t4-spot", "a100-idle", "cpu", "nap-l4", "a100-serve"}
    l4, t4, idle = pools["l4-pool"], pools["t4-spot"], pools["a100-idle"]
    assert l4.id == f"{TRAIN}/l4-pool"
    assert (l4.category, l4.cluster, l4.region, l4.account) == (
        Category.NODE_GROUP, "train", "us-central1", "ml-dev")
    assert (l4.count, l4.instance_type, l4.state, l4.capacity) == (
        4, "g2-standard-8", State.RUNNING, Capacity.ON_DEMAND)
    assert l4.gpu is not None and (l4.gpu.model, l4.gpu.count) == ("NVIDIA L4", 1)
    assert l4.tags == {"team": "ml", "cost-center": "cc-4711", "workload": "train",
                       "project": "llm"}
    assert l4.billing_tags == {"team": "ml", "cost-center": "cc-4711", "project": "llm"}
    assert t4.gpu is not None and (t4.gpu.model, t4.gpu.count) == ("NVIDIA T4", 2)
    assert (t4.count, t4.capacity, t4.hourly_usd) == (2, Capacity.SPOT, pytest.approx(0.7))
    assert (idle.count, idle.state) == (0, State.STOPPED)
    assert pools["cpu"].gpu is None or pools["cpu"].gpu.count == 0
    assert pools["a100-serve"].namespace_labels == {"env": "prod"}


def test_scan_findings_and_the_snapshot_replay(
    gke: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle = tmp_path / "snap.json"
    _, report, _ = scan(capsys, monkeypatch, "--save-snapshot", str(bundle), now=EVENING)
    stops = by_action(report, "stop")
    assert {name: r["status"] for name, r in stops.items()} == dict.fromkeys(
        [*SCALED, "nap-l4"], "planned")  # Autopilot is seen when acting
    assert stops["l4-pool"]["detail"] == (f"would scale {TRAIN}/l4-pool to zero (previous "
                                          "size 4 recorded)")
    failing = {f["resource"]["name"] for f in report["findings"] if f["result"] == "fail"
               and f["policy"] == "gpu-off-hours-shutdown"}
    assert {"l4-pool", "t4-spot"} <= failing
    assert not {"a100-idle", "cpu", "a100-serve"} & failing  # at zero; no GPU; production
    assert gke_mutations(gke) == []

    replayed = load_snapshot_resources(bundle, builtin_catalog())
    live = {r.id: r for r in collect_live(gke).resources}
    for resource in replayed:
        if resource.kind == "google_container_node_pool":
            assert resource.model_dump(exclude={"raw"}) == live[resource.id].model_dump(
                exclude={"raw"})
    saved = json.loads(bundle.read_text())["gcp"]["projects"]
    assert [c["name"] for p in saved for c in p.get("clusters", [])] == ["train", "auto",
                                                                         "serve"]


@pytest.fixture
def scaled_overnight(gke: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> FakeGcp:
    _, report, _ = scan(capsys, monkeypatch, "--enforce", "--audit-log",
                        str(tmp_path / "audit.jsonl"), now=EVENING)
    stops = by_action(report, "stop")
    assert stops.pop("nap-l4") == {
        "action": "stop", "status": "skipped", "detail": "projects/ml-dev/locations/europe-west4/"
        "clusters/auto/nodePools/nap-l4: GKE Autopilot manages its node pools"}
    assert {name: r["status"] for name, r in stops.items()} == dict.fromkeys(SCALED, "applied")
    return gke


def test_off_hours_scale_to_zero_then_on_hours_restore(
    scaled_overnight: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = scaled_overnight
    schedule = escaped_schedule("off=(M-F,19);on=(M-F,7);tz=utc")
    assert labels(api, "l4-pool") == {
        "project": "llm", STOPPED_BY_LABEL: "gpu-off-hours-shutdown_20261201t220000z",
        RESUME_SCHEDULE_LABEL: schedule, PREVIOUS_SIZE_LABEL: "zone_1_4_2"}
    assert labels(api, "t4-spot")[PREVIOUS_SIZE_LABEL] == "fixed_0_0_1"
    for name in SCALED:
        assert api.gke.nodes(pool(api, name)) == [0, 0]
    assert pool(api, "l4-pool")["autoscaling"] == {"enabled": False}
    assert api.gke.nodes(pool(api, "a100-serve", "ml-prod")) == [1]  # production
    assert api.gke.nodes(pool(api, "cpu")) == [3, 3]  # no GPU
    auto = api.gke.pool("ml-dev", "europe-west4", "auto", "nap-l4")
    assert auto is not None and api.gke.nodes(auto) == [1]  # Autopilot: left to GKE
    sent = len(api.mutations())

    planned = by_action(scan(capsys, monkeypatch, now=MORNING)[1], "resume")
    assert {name: r["status"] for name, r in planned.items()} == dict.fromkeys(SCALED,
                                                                               "planned")
    assert planned["l4-pool"]["detail"] == (f"would resume {TRAIN}/l4-pool (stopped at "
                                            "2026-12-01T22:00:00+00:00)")
    assert len(api.mutations()) == sent  # dry-run: nothing sent

    audit = tmp_path / "morning.jsonl"
    report = scan(capsys, monkeypatch, "--enforce", "--audit-log", str(audit), now=MORNING)[1]
    assert {name: r["status"] for name, r in by_action(report, "resume").items()} == \
        dict.fromkeys(SCALED, "applied")
    for name, nodes in SCALED.items():
        assert api.gke.nodes(pool(api, name)) == nodes
        assert not MARKS & set(labels(api, name))
    assert pool(api, "l4-pool")["autoscaling"] == L4_AUTOSCALING
    assert labels(api, "l4-pool") == {"project": "llm"}
    assert api.gke.nodes(pool(api, "a100-idle")) == [0, 0]  # scaled to zero by hand: stays
    resumed = sorted((e["resource"].rsplit("/", 1)[-1], e["phase"]) for e in audit_lines(audit)
                     if e["action"] == "resume" and e["kind"] == "google_container_node_pool")
    assert resumed == sorted((name, phase) for name in SCALED for phase in ("before", "after"))

    again = scan(capsys, monkeypatch, "--enforce", "--audit-log", str(audit), now=MORNING)[1]
    assert by_action(again, "resume") == {}


def test_each_operation_is_waited_for_before_the_next(scaled_overnight: FakeGcp) -> None:
    sequence = []
    for request in scaled_overnight.requests:
        if "/operations/" in request.path:
            sequence.append("wait")
        elif request.path.startswith("/v1/") and request.method == "PUT":
            sequence.append(f"update {request.path.rsplit('/', 1)[-1]}")
        elif request.path.startswith("/v1/") and request.method == "POST":
            sequence.append(request.path.rsplit(":", 1)[-1])
    # per pool: labels first (the way back), then the autoscaler off (l4 only), then size 0
    assert sequence == ["update l4-pool", "wait", "setAutoscaling", "wait", "setSize", "wait",
                        "update t4-spot", "wait", "setSize", "wait"]


def test_a_pool_scaled_back_up_by_hand_is_left_alone(
    scaled_overnight: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = scaled_overnight
    for url in pool(api, "t4-spot")["instanceGroupUrls"]:  # someone needed it at 06:00
        parts = url.split("/projects/", 1)[1].split("/")
        api.gke.group_sizes[f"{parts[0]}/{parts[2]}/{parts[4]}"] = 3
    sent = len(api.mutations())
    report = scan(capsys, monkeypatch, "--enforce", "--audit-log", str(tmp_path / "a.jsonl"),
                  now=MORNING)[1]
    resumed = by_action(report, "resume")
    assert resumed["t4-spot"]["status"] == "skipped"
    assert "no longer at zero" in resumed["t4-spot"]["detail"]
    assert api.gke.nodes(pool(api, "t4-spot")) == [3, 3]
    assert not any("t4-spot" in r.path for r in api.mutations()[sent:])


def test_dry_run_at_off_hours_sends_nothing(
    gke: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    scan(capsys, monkeypatch, now=EVENING)
    assert gke.mutations() == []
    assert api_nodes(gke) == {"l4-pool": [2, 2], "t4-spot": [1, 1], "a100-idle": [0, 0],
                              "cpu": [3, 3]}


def api_nodes(api: FakeGcp) -> dict[str, list[int]]:
    return {p["name"]: api.gke.nodes(p) for p in api.gke.clusters["ml-dev"][0]["nodePools"]}


def test_clusters_not_listable_are_a_warning_and_instances_are_scanned(
    gke: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    gke.gke.forbidden.add("ml-dev")
    _, report, err = scan(capsys, monkeypatch, now=EVENING)
    assert ("gcp: project ml-dev: GKE clusters not listed: permission denied (HTTP 403): "
            "Required 'container.clusters.list' permission for 'projects/ml-dev'") in err
    names = {f["resource"]["name"] for f in report["findings"]}
    assert "trainer-t4" in names and "l4-pool" not in names and "a100-serve" in names


def test_the_recorded_size_reads_back_and_bounds_hold() -> None:
    for size in (PoolSize("zone", 1, 4, 2), PoolSize("total", 0, 12, 3), PoolSize("fixed", 0,
                                                                                   0, 5)):
        assert parse_size(size.label) == size
    assert parse_size("zone_1_4_99999") == PoolSize("zone", 1, 4, 5000)
    for bad in ("", "zone_1_4", "zone_-1_4_2", "auto_1_4_2", "zone_1_4_2_"):
        assert parse_size(bad) is None


def test_the_permissions_used_are_documented() -> None:
    from engine.sources.gcp.gke_readers import SCAN_PERMISSIONS
    from remediations.gke_actions import ENFORCE_PERMISSIONS

    permissions = (Path(__file__).parents[1] / "docs" / "gcp-azure.md").read_text()
    permissions = permissions.split("## Permissions", 1)[1].split("\n## ", 1)[0]
    for permission in (*SCAN_PERMISSIONS, *ENFORCE_PERMISSIONS):
        assert f"`{permission}`" in permissions, permission


def test_a_pool_machine_type_the_catalog_lacks_is_asked(
    gke: FakeGcp, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from google.cloud import compute_v1

    from engine.sources.gcp import machine_types

    monkeypatch.setattr(machine_types, "_remembered", {})
    add_cluster(gke.gke, "ml-dev", "future", "us-west1-b", ["us-west1-b"], [
        {"name": "h100", "nodes": 2, "initialNodeCount": 2,
         "config": {"machineType": "a9-highgpu-8g"}}])
    gke.machine_types["a9-highgpu-8g"] = compute_v1.MachineType(
        name="a9-highgpu-8g", guest_cpus=208, memory_mb=1_900_000, zone="us-west1-b",
        accelerators=[compute_v1.Accelerators(guest_accelerator_type="nvidia-h100-80gb",
                                              guest_accelerator_count=8)])
    pools = {r.name: r for r in collect_live(gke).resources}
    asked = [r.path for r in gke.requests if "/machineTypes/" in r.path]
    assert asked == ["/compute/v1/projects/ml-dev/zones/us-west1-b/machineTypes/a9-highgpu-8g"]
    h100 = pools["h100"]
    assert h100.gpu is not None and (h100.gpu.model, h100.gpu.count) == ("NVIDIA H100 80GB", 8)
    assert h100.count == 2


def test_a_refused_call_fails_that_pool_and_the_run_goes_on(
    gke: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = gcp_tests.GkeRoutes
    original = routes._mutate

    def refuse_l4(self: Any, pool: dict[str, Any], verb: str, body: dict[str, Any]
                  ) -> str | None:
        if pool["name"] == "l4-pool" and verb == "setSize":
            return "Insufficient regional quota"
        return original(self, pool, verb, body)

    monkeypatch.setattr(routes, "_mutate", refuse_l4)
    audit = tmp_path / "audit.jsonl"
    report = scan(capsys, monkeypatch, "--enforce", "--audit-log", str(audit), now=EVENING)[1]
    stops = by_action(report, "stop")
    assert stops["l4-pool"]["status"] == "failed"
    assert "Insufficient regional quota" in stops["l4-pool"]["detail"]
    assert stops["t4-spot"]["status"] == "applied"
    assert api_nodes(gke)["l4-pool"] == [2, 2]
    # the way back was written first: the mark and size stay for a retry or a person to read
    assert labels(gke, "l4-pool")[PREVIOUS_SIZE_LABEL] == "zone_1_4_2"
    failed = [e for e in audit_lines(audit) if e["result"] == "failed"]
    assert [e["resource"].rsplit("/", 1)[-1] for e in failed] == ["l4-pool"]
    assert pool(gke, "l4-pool")["autoscaling"] == {"enabled": False}  # off before the refusal

    monkeypatch.setattr(routes, "_mutate", original)  # the quota is raised; the next run
    report = scan(capsys, monkeypatch, "--enforce", "--audit-log", str(audit), now=EVENING)[1]
    assert by_action(report, "stop")["l4-pool"]["status"] == "applied"
    assert api_nodes(gke)["l4-pool"] == [0, 0]
    assert labels(gke, "l4-pool")[PREVIOUS_SIZE_LABEL] == "zone_1_4_2"  # not "fixed_0_0_2"


def test_a_cluster_labelled_production_since_the_listing_is_not_changed(
    gke: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = gcp_tests.GkeRoutes
    original = routes._cluster

    def relabelled(self: Any, project: str, location: str, name: str) -> None:
        for cluster in self.state.clusters.get(project, []):
            if cluster["name"] == "train":
                cluster["resourceLabels"]["env"] = "prod"  # between the listing and the act
        return original(self, project, location, name)

    monkeypatch.setattr(routes, "_cluster", relabelled)
    report = scan(capsys, monkeypatch, "--enforce", "--audit-log", str(tmp_path / "a.jsonl"),
                  now=EVENING)[1]
    stops = by_action(report, "stop")
    for name in SCALED:
        assert stops[name]["status"] == "skipped"
        assert stops[name]["detail"].startswith("now ")
        assert "production" in stops[name]["detail"]
    assert gke_mutations(gke) == []
    assert api_nodes(gke)["l4-pool"] == [2, 2]
