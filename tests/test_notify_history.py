"""`scan --notify ... --history URL`: "new" is new since the last run recorded in the history,
not since the state file; a finding fixed in between is news again when it fails again."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.demo import demo_policy_paths, demo_snapshot_path
from engine.history.last_run import LOOK_BACK, previous_failing
from engine.history.record import record_run
from tests import test_notify
from tests.test_notify import Receiver

receiver = test_notify.receiver  # a loopback JSON webhook

NIGHT = "2026-03-04T22:30:00Z"  # a Wednesday, off-hours
LATER = "2026-03-04T23:30:00Z"
NOON = "2026-03-05T12:00:00Z"  # business hours: the off-hours findings are fixed
NEXT_NIGHT = "2026-03-05T23:00:00Z"


def scan(now: str, history: Path, url: str, state: Path, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    policies = [arg for path in demo_policy_paths() for arg in ("--policies", str(path))]
    monkeypatch.setattr(sys, "argv", [
        "gpuwarden", "scan", "--source", f"snapshot:{demo_snapshot_path()}", *policies,
        "--now", now, "--format", "json", "--quiet", "--history", str(history),
        "--notify", url, "--notify-state", str(state)])
    with pytest.raises(SystemExit):
        main()
    out, err = capsys.readouterr()
    assert "warning" not in err, err
    return dict(json.loads(out))


def failing(report: dict[str, Any], policy: str | None = None) -> set[str]:
    return {f"{f['policy']}|{f['resource']['provider']}|{f['resource']['id']}"
            for f in report["findings"] if f["result"] == "fail"
            and (policy is None or f["policy"] == policy)}


def test_new_since_the_last_recorded_run(
    receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    history, state = tmp_path / "runs.db", tmp_path / "state.json"
    night = scan(NIGHT, history, receiver.url, state, capsys, monkeypatch)
    [first] = receiver.bodies
    assert first["new_findings"] == len(failing(night)) > 0  # no earlier run: all news
    assert not state.exists()  # the history is the state

    scan(LATER, history, receiver.url, state, capsys, monkeypatch)
    noon = scan(NOON, history, receiver.url, state, capsys, monkeypatch)
    assert len(receiver.bodies) == 1  # nothing new an hour later, nor at noon
    assert not failing(noon, "gpu-off-hours-shutdown")

    next_night = scan(NEXT_NIGHT, history, receiver.url, state, capsys, monkeypatch)
    [_, second] = receiver.bodies
    again = failing(next_night) - failing(noon)
    assert again and {key.split("|")[0] for key in again} == {"gpu-off-hours-shutdown"}
    assert second["new_findings"] == len(again)  # fixed at noon, failing again: news again


def test_previous_failing_reads_the_last_run_before_the_instant(tmp_path: Path) -> None:
    url = str(tmp_path / "runs.db")

    def record(at: str, keys: list[tuple[str, str]]) -> None:
        report = {"findings": [
            {"policy": policy, "result": result, "resource": {"provider": "aws", "id": "i-1"}}
            for policy, result in keys]}
        record_run(url, at=datetime.fromisoformat(at), command="scan", source="aws",
                   report_json=json.dumps(report), snapshot={})

    record("2026-03-01T00:00:00+00:00", [("old", "fail")])
    record("2026-03-02T00:00:00+00:00", [("a", "fail"), ("b", "pass"), ("c", "unknown")])
    record("2026-03-03T00:00:00+00:00", [("future", "fail")])
    assert previous_failing(url, datetime.fromisoformat("2026-03-02T12:00:00+00:00")) == {
        "a|aws|i-1"}
    long_after = datetime.fromisoformat("2026-03-03T00:00:00+00:00") + LOOK_BACK * 2
    assert previous_failing(url, long_after) == set()
