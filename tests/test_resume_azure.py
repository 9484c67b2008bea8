"""Resume at on-hours on Azure, through the official SDK against the loopback ARM server (TLS) of
tests/test_azure_source.py: enforcement at 22:00 UTC on a weekday tags and deallocates the
non-production GPU VMs and scales the GPU AKS node pools to zero; enforcement at 08:00 the next
weekday starts exactly those VMs, restores the pools' sizes and deletes the tags; a VM
deallocated by someone else stays deallocated; dry-run only plans."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from remediations.azure_actions import PREVIOUS_SIZE_TAG
from remediations.planning import RESUME_SCHEDULE_TAG, STOPPED_BY_TAG
from tests import test_azure_source as azure_tests
from tests.test_azure_source import DEV, FakeArm, audit_lines, name_of, scan, set_power, vm_id

# The source tests' fixtures: the loopback ARM server and its TLS certificate.
tls = azure_tests.tls
fake_arm = azure_tests.fake_arm

EVENING = datetime.fromisoformat("2026-12-01T22:00:00+00:00")  # a Tuesday: off-hours
MORNING = datetime.fromisoformat("2026-12-02T08:00:00+00:00")  # the next weekday: on-hours
STOPPED = ("train-a100", "spot-t4", "win-v100")
POOLS = {"gpuspot": 2, "gpu": 1}  # the GPU node pools of aks-ml and their node counts
MARKS = {STOPPED_BY_TAG, RESUME_SCHEDULE_TAG}


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, now: datetime,
        *extra: str) -> dict[str, Any]:
    report, _ = scan(capsys, monkeypatch, *extra, now=now)
    return report


def resumes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name_of(f["resource"]["id"]): f["remediation"] for f in report["findings"]
            if (f.get("remediation") or {}).get("action") == "resume"}


def power(api: FakeArm, name: str) -> str:
    vm = api.vm(vm_id(DEV, name))
    assert vm is not None
    return str(vm.properties.instance_view.statuses[-1].code).removeprefix("PowerState/")


def pool(api: FakeArm, name: str) -> Any:
    [cluster] = api.subscriptions[DEV].clusters
    [found] = [p for p in cluster.properties.agent_pool_profiles if p.name == name]
    return found


def tags(api: FakeArm, name: str) -> dict[str, str]:
    vm = api.vm(vm_id(DEV, name))
    assert vm is not None
    return dict(vm.tags or {})


@pytest.fixture
def deallocated_overnight(fake_arm: FakeArm, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> FakeArm:
    """Enforced at 22:00; the deallocations have finished by the morning."""
    run(capsys, monkeypatch, EVENING, "--enforce", "--audit-log", str(tmp_path / "audit.jsonl"))
    for name in STOPPED:
        assert power(fake_arm, name) == "deallocating"
        set_power(fake_arm.vm(vm_id(DEV, name)), "deallocated")  # type: ignore[arg-type]
    return fake_arm


def test_off_hours_deallocate_then_on_hours_start(
    deallocated_overnight: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = deallocated_overnight
    for name in STOPPED:
        assert tags(api, name)[STOPPED_BY_TAG] == \
            "gpu-off-hours-shutdown@2026-12-01T22:00:00+00:00"
        assert tags(api, name)[RESUME_SCHEDULE_TAG] == "off=(M-F,19);on=(M-F,7);tz=utc"
    assert tags(api, "train-a100")["team"] == "ml"
    for name, count in POOLS.items():
        assert pool(api, name).count == 0
        assert pool(api, name).tags[PREVIOUS_SIZE_TAG] == f"0,0,{count}"
        assert pool(api, name).tags[STOPPED_BY_TAG].startswith("gpu-off-hours-shutdown@")
    assert pool(api, "system").count == 3
    sent = len(api.mutations())

    planned = resumes(run(capsys, monkeypatch, MORNING))
    assert {name: r["status"] for name, r in planned.items()} == dict.fromkeys(
        [*STOPPED, *POOLS], "planned")
    assert len(api.mutations()) == sent  # dry-run: nothing sent

    audit = tmp_path / "audit.jsonl"
    report = run(capsys, monkeypatch, MORNING, "--enforce", "--audit-log", str(audit))
    assert {name: r["status"] for name, r in resumes(report).items()} == dict.fromkeys(
        [*STOPPED, *POOLS], "applied")
    for name, count in POOLS.items():
        assert pool(api, name).count == count and not pool(api, name).enable_auto_scaling
        assert not {*MARKS, PREVIOUS_SIZE_TAG} & set(pool(api, name).tags)
    starts = sorted(name_of(r.path.removesuffix("/start")) for r in api.mutations()[sent:]
                    if r.method == "POST")
    assert starts == sorted(STOPPED)
    for name in STOPPED:
        assert power(api, name) == "starting"
        assert not MARKS & set(tags(api, name))
    assert tags(api, "train-a100")["team"] == "ml"  # other tags kept
    assert power(api, "idle-a10") == "deallocated"  # deallocated by someone else
    resumed = [(name_of(e["resource"]), e["phase"]) for e in audit_lines(audit)
               if e["action"] == "resume"]
    assert sorted(resumed) == sorted((name, phase) for name in [*STOPPED, *POOLS]
                                     for phase in ("before", "after"))

    again = run(capsys, monkeypatch, MORNING, "--enforce", "--audit-log", str(audit))
    assert resumes(again) == {}


def test_resume_respects_max_actions(
    deallocated_overnight: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = deallocated_overnight
    report = run(capsys, monkeypatch, MORNING, "--enforce", "--audit-log",
                 str(tmp_path / "a.jsonl"), "--max-actions", "2")
    assert sorted(r["status"] for r in resumes(report).values()) == [
        "applied", "applied", "skipped", "skipped", "skipped"]
    back = sum(power(api, name) == "starting" for name in STOPPED)
    assert back + sum(pool(api, name).count != 0 for name in POOLS) == 2


def test_a_vm_started_by_hand_since_is_left_alone(
    deallocated_overnight: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = deallocated_overnight
    set_power(api.vm(vm_id(DEV, "spot-t4")), "running")  # type: ignore[arg-type]
    report = run(capsys, monkeypatch, MORNING, "--enforce", "--audit-log",
                 str(tmp_path / "a.jsonl"))
    spot = resumes(report)["spot-t4"]
    assert spot["status"] == "skipped" and spot["detail"].endswith("is running, not deallocated")
    assert not [r for r in api.mutations() if r.path == vm_id(DEV, "spot-t4") + "/start"]


def test_an_autoscaled_pool_gets_its_autoscaler_back(
    fake_arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = pool(fake_arm, "gpu")
    gpu.enable_auto_scaling, gpu.min_count, gpu.max_count = True, 1, 4
    run(capsys, monkeypatch, EVENING, "--enforce", "--audit-log", str(tmp_path / "a.jsonl"))
    assert (gpu.count, gpu.enable_auto_scaling) == (0, False)
    assert gpu.tags[PREVIOUS_SIZE_TAG] == "1,4,1"
    run(capsys, monkeypatch, MORNING, "--enforce", "--audit-log", str(tmp_path / "a.jsonl"))
    assert (gpu.count, gpu.enable_auto_scaling, gpu.min_count, gpu.max_count) == (1, True, 1, 4)
