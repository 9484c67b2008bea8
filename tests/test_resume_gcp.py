"""Resume at on-hours on Google Cloud, through the official client against the loopback server of
tests/test_gcp_source.py: enforcement at 22:00 UTC on a weekday labels and stops the
non-production GPU instances; enforcement at 08:00 the next weekday starts exactly those and
removes the labels; an instance stopped by someone else stays stopped; dry-run only plans."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from remediations.gcp_actions import escaped_schedule, stop_mark_labels
from remediations.planning import RESUME_SCHEDULE_LABEL, STOPPED_BY_LABEL
from tests import test_gcp_source as gcp_tests
from tests.test_gcp_source import FakeGcp, audit_lines, scan

# The source tests' fixture: the loopback Compute Engine and Resource Manager APIs.
fake_gcp = gcp_tests.fake_gcp

EVENING = datetime.fromisoformat("2026-12-01T22:00:00+00:00")  # a Tuesday: off-hours
MORNING = datetime.fromisoformat("2026-12-02T08:00:00+00:00")  # the next weekday: on-hours
STOPPED = {"trainer-t4": "us-central1-a", "l4-preemptible": "europe-west4-b"}
MARKS = {STOPPED_BY_LABEL, RESUME_SCHEDULE_LABEL}


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, now: datetime,
        *extra: str) -> dict[str, Any]:
    _, report, _ = scan(capsys, monkeypatch, *extra, now=now)
    return report


def resumes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"].rsplit("/", 1)[-1]: f["remediation"] for f in report["findings"]
            if (f.get("remediation") or {}).get("action") == "resume"}


def instance(api: FakeGcp, name: str, zone: str = "us-central1-a") -> Any:
    found = api.find("ml-dev", STOPPED.get(name, zone), name)
    assert found is not None
    return found


@pytest.fixture
def stopped_overnight(fake_gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> FakeGcp:
    """Enforced at 22:00; the stop operations have finished by the morning."""
    run(capsys, monkeypatch, EVENING, "--enforce", "--audit-log", str(tmp_path / "audit.jsonl"))
    for name in STOPPED:
        assert instance(fake_gcp, name).status == "STOPPING"
        instance(fake_gcp, name).status = "TERMINATED"
    return fake_gcp


def test_off_hours_stop_then_on_hours_start(
    stopped_overnight: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = stopped_overnight
    for name in STOPPED:
        labels = dict(instance(api, name).labels)
        assert labels[STOPPED_BY_LABEL] == "gpu-off-hours-shutdown_20261201t220000z"
        assert labels[RESUME_SCHEDULE_LABEL] == escaped_schedule("off=(M-F,19);on=(M-F,7);tz=utc")
    assert dict(instance(api, "trainer-t4").labels)["team"] == "ml"  # other labels kept
    sent = len(api.mutations())

    planned = resumes(run(capsys, monkeypatch, MORNING))
    assert {name: r["status"] for name, r in planned.items()} == dict.fromkeys(STOPPED,
                                                                               "planned")
    assert planned["trainer-t4"]["detail"] == (
        "would resume projects/ml-dev/zones/us-central1-a/instances/trainer-t4 (stopped at "
        "2026-12-01T22:00:00+00:00)")
    assert len(api.mutations()) == sent  # dry-run: nothing sent

    audit = tmp_path / "audit.jsonl"
    report = run(capsys, monkeypatch, MORNING, "--enforce", "--audit-log", str(audit))
    assert {name: r["status"] for name, r in resumes(report).items()} == dict.fromkeys(
        STOPPED, "applied")
    starts = sorted(r.path.rsplit("/", 2)[-2] for r in api.mutations()[sent:]
                    if r.path.endswith("/start"))
    assert starts == sorted(STOPPED)
    for name in STOPPED:
        assert instance(api, name).status == "STAGING"
        assert not MARKS & set(instance(api, name).labels)
    assert dict(instance(api, "trainer-t4").labels)["team"] == "ml"
    assert instance(api, "v100-stopped").status == "TERMINATED"  # stopped by someone else
    resumed = [(e["resource"].rsplit("/", 1)[-1], e["phase"]) for e in audit_lines(audit)
               if e["action"] == "resume"]
    assert sorted(resumed) == sorted((name, phase) for name in STOPPED
                                     for phase in ("before", "after"))

    again = run(capsys, monkeypatch, MORNING, "--enforce", "--audit-log", str(audit))
    assert resumes(again) == {}


def test_resume_respects_max_actions(
    stopped_overnight: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = stopped_overnight
    report = run(capsys, monkeypatch, MORNING, "--enforce", "--audit-log",
                 str(tmp_path / "a.jsonl"), "--max-actions", "1")
    assert sorted(r["status"] for r in resumes(report).values()) == ["applied", "skipped"]
    assert sum(instance(api, name).status != "TERMINATED" for name in STOPPED) == 1


def test_a_stop_mark_fits_gcp_label_rules() -> None:
    labels = stop_mark_labels("Team/Policy.X", EVENING, "off=[(M-F,21),(U,18)];on=[(M-F,6),"
                              "(U,10)];tz=America/Los_Angeles")
    assert labels == {STOPPED_BY_LABEL: "team_policy_x_20261201t220000z"}  # too long: left out
    assert escaped_schedule("off=(F,18);on=(M,8);tz=Europe/Berlin") == (
        "offu3du28fu2c18u29u3bonu3du28mu2c8u29u3btzu3deuropeu2fberlin")
    assert escaped_schedule("off=(M-F,19);tz=Etc/GMT+5") is None  # '+' has no escape
