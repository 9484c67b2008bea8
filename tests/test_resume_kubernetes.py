"""Resume at on-hours on Kubernetes, through the real client against the loopback API server of
tests/test_kubernetes_live.py: enforcement at 22:00 UTC on a weekday scales the non-production
GPU Deployment and StatefulSet to zero and marks them (annotations); enforcement at 08:00 the
next weekday scales exactly those back to their recorded replicas and removes the marks; a
workload scaled to zero by hand stays at zero; dry-run only plans the resumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remediations.kubernetes_actions import PREVIOUS_REPLICAS, PREVIOUS_SUSPEND
from remediations.planning import RESUME_SCHEDULE_ANNOTATION, STOPPED_BY_ANNOTATION
from tests import test_kubernetes_live as live
from tests.test_kubernetes_live import FakeApi, audit_lines, deployment, run_cli

# The live tests' fixtures: the loopback API server and a kubeconfig naming it.
fake_api = live.fake_api
kubeconfig = live.kubeconfig

EVENING = "2026-12-01T22:00:00Z"  # a Tuesday, off-hours by the default schedule
MORNING = "2026-12-02T08:00:00Z"  # the next weekday, on-hours
MARKS = {STOPPED_BY_ANNOTATION, RESUME_SCHEDULE_ANNOTATION, PREVIOUS_REPLICAS}
TRAINER = "/apis/apps/v1/namespaces/ml/deployments/trainer-a"
NOTEBOOK = "/apis/apps/v1/namespaces/ml/statefulsets/notebook"
NIGHTLY = "/apis/batch/v1/namespaces/ml/cronjobs/nightly"
RESUMED = ("Deployment/ml/trainer-a", "StatefulSet/ml/notebook", "CronJob/ml/nightly")


def scan(kubeconfig: Path, now: str, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch, *extra: str) -> dict[str, Any]:
    code, out, err = run_cli(["scan", "--source", "k8s", "--kubeconfig", str(kubeconfig),
                              "-f", "json", "--now", now, *extra], capsys, monkeypatch)
    assert code in (0, 1), err
    return dict(json.loads(out))


def resumes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"]: f["remediation"] for f in report["findings"]
            if (f.get("remediation") or {}).get("action") == "resume"}


def workload(api: FakeApi, kind: str, name: str) -> dict[str, Any]:
    found = api.find(kind, "ml", name)
    assert found is not None
    return found


def replicas(api: FakeApi, kind: str, name: str) -> int:
    return int(workload(api, kind, name)["spec"]["replicas"])


def annotations(api: FakeApi, kind: str, name: str) -> dict[str, str]:
    return dict(workload(api, kind, name)["metadata"].get("annotations") or {})


@pytest.fixture
def stopped_overnight(fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
                      ) -> FakeApi:
    """Enforced at 22:00; then someone scales another GPU Deployment to zero by hand."""
    api, _ = fake_api
    scan(kubeconfig, EVENING, capsys, monkeypatch, "--enforce", "--audit-log",
         str(tmp_path / "audit.jsonl"))
    manual = deployment("by-hand", "ml", 0)
    manual["metadata"]["annotations"] = {PREVIOUS_REPLICAS: "4"}  # but no gpuwarden mark
    api.objects["Deployment"].append(manual)
    return api


def test_off_hours_scale_down_then_on_hours_scale_back(
    stopped_overnight: FakeApi, kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = stopped_overnight
    assert replicas(api, "Deployment", "trainer-a") == 0
    assert replicas(api, "StatefulSet", "notebook") == 0
    marks = annotations(api, "Deployment", "trainer-a")
    assert marks[STOPPED_BY_ANNOTATION] == "gpu-off-hours-shutdown@2026-12-01T22:00:00+00:00"
    assert marks[RESUME_SCHEDULE_ANNOTATION].startswith("off=")
    assert marks[PREVIOUS_REPLICAS] == "3"
    patched = len(api.mutations())

    planned = resumes(scan(kubeconfig, MORNING, capsys, monkeypatch))
    assert planned == {
        workload_id: {"action": "resume", "status": "planned",
                      "detail": f"would resume {workload_id} (stopped at "
                                "2026-12-01T22:00:00+00:00)"}
        for workload_id in RESUMED}
    assert len(api.mutations()) == patched  # dry-run: nothing sent

    audit = tmp_path / "audit.jsonl"
    report = scan(kubeconfig, MORNING, capsys, monkeypatch, "--enforce", "--audit-log",
                  str(audit))
    assert {rid: r["status"] for rid, r in resumes(report).items()} == dict.fromkeys(
        RESUMED, "applied")
    assert replicas(api, "Deployment", "trainer-a") == 3
    assert replicas(api, "StatefulSet", "notebook") == 1
    assert not MARKS & set(annotations(api, "Deployment", "trainer-a"))
    assert not MARKS & set(annotations(api, "StatefulSet", "notebook"))
    assert workload(api, "CronJob", "nightly")["spec"]["suspend"] is False
    assert not {STOPPED_BY_ANNOTATION, RESUME_SCHEDULE_ANNOTATION, PREVIOUS_SUSPEND} & set(
        annotations(api, "CronJob", "nightly"))
    assert replicas(api, "Deployment", "by-hand") == 0  # stopped by hand: left alone
    assert api.find("Deployment", "prod", "serving")["spec"]["replicas"] == 2  # type: ignore[index]

    resumed = api.mutations()[patched:]
    assert sorted(r.path for r in resumed) == sorted([TRAINER, NOTEBOOK, NIGHTLY])
    nightly = next(r for r in resumed if r.path == NIGHTLY)
    assert nightly.body["spec"] == {"suspend": False}
    assert nightly.body["metadata"]["annotations"] == dict.fromkeys(
        (STOPPED_BY_ANNOTATION, RESUME_SCHEDULE_ANNOTATION, PREVIOUS_SUSPEND))
    trainer = next(r for r in resumed if r.path == TRAINER)
    assert trainer.body["spec"] == {"replicas": 3}
    assert trainer.body["metadata"]["annotations"] == dict.fromkeys(MARKS)
    assert trainer.body["metadata"]["resourceVersion"]  # the precondition travels
    lines = [(line["target"]["name"], line["phase"]) for line in audit_lines(audit)
             if line["action"] == "resume"]
    assert sorted(lines) == sorted((name, phase) for name in ("trainer-a", "notebook", "nightly")
                                   for phase in ("before", "after"))

    again = scan(kubeconfig, MORNING, capsys, monkeypatch, "--enforce", "--audit-log",
                 str(audit))
    assert resumes(again) == {}


def test_resume_respects_max_actions(
    stopped_overnight: FakeApi, kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = stopped_overnight
    report = scan(kubeconfig, MORNING, capsys, monkeypatch, "--enforce", "--audit-log",
                  str(tmp_path / "audit.jsonl"), "--max-actions", "1")
    statuses = sorted(r["status"] for r in resumes(report).values())
    assert statuses == ["applied", "skipped", "skipped"]
    back = (replicas(api, "Deployment", "trainer-a") != 0) + \
        (replicas(api, "StatefulSet", "notebook") != 0) + \
        (workload(api, "CronJob", "nightly")["spec"]["suspend"] is False)
    assert back == 1


def test_a_workload_scaled_up_since_is_not_touched(
    stopped_overnight: FakeApi, kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Someone scaled it to 5 by hand after the listing: the fresh read sees it, no patch."""
    api = stopped_overnight
    patched = [r.path for r in api.mutations()]
    original = api.find

    def scaled_after_listing(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = original(kind, namespace, name)
        if found is not None and name == "trainer-a":
            found["spec"]["replicas"] = 5
        return found

    monkeypatch.setattr(api, "find", scaled_after_listing)
    report = scan(kubeconfig, MORNING, capsys, monkeypatch, "--enforce", "--audit-log",
                  str(tmp_path / "audit.jsonl"))
    trainer = resumes(report)["Deployment/ml/trainer-a"]
    assert trainer["status"] == "skipped" and "no longer at zero" in trainer["detail"]
    assert sorted(r.path for r in api.mutations()[len(patched):]) == sorted([NOTEBOOK, NIGHTLY])
    assert [r.path for r in api.mutations()][:len(patched)] == patched
    assert replicas(api, "Deployment", "trainer-a") == 5


def test_a_cronjob_suspended_by_hand_or_resumed_since_is_left_alone(
    stopped_overnight: FakeApi, kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = stopped_overnight
    nightly = workload(api, "CronJob", "nightly")
    assert nightly["spec"]["suspend"] is True
    assert annotations(api, "CronJob", "nightly")[STOPPED_BY_ANNOTATION] == (
        "gpu-off-hours-shutdown@2026-12-01T22:00:00+00:00")
    nightly["spec"]["suspend"] = False  # someone resumed it at 06:00
    by_hand = live.cronjob("weekly", "ml", suspend=True)  # suspended by hand: no mark
    api.objects["CronJob"].append(by_hand)
    patched = len(api.mutations())
    report = scan(kubeconfig, MORNING, capsys, monkeypatch, "--enforce", "--audit-log",
                  str(tmp_path / "audit.jsonl"))
    found = resumes(report)
    assert found["CronJob/ml/nightly"] == {
        "action": "resume", "status": "skipped",
        "detail": "CronJob/ml/nightly is no longer suspended"}
    assert "CronJob/ml/weekly" not in found
    assert NIGHTLY not in [r.path for r in api.mutations()[patched:]]
    assert workload(api, "CronJob", "weekly")["spec"]["suspend"] is True
