"""Run history (`--history`), `gpuwarden history` and `gpuwarden what-if`, through the CLI."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from engine.demo import demo_policy_paths
from tests.conftest import REPO
from tests.conftest_aws import AwsLab, aws_fixture, moto_endpoint_fixture  # noqa: F401
from tests.test_cli import run_cli

NIGHT = "2026-06-08T23:00:00Z"  # off-hours: gpu-off-hours-shutdown fails too
DAY = "2026-06-09T12:00:00Z"
STRICT = """apiVersion: gpuwarden.io/v1
overrides:
  gpu-underutilized:
    parameters:
      threshold_pct: 90
"""


def scan_into(history: str, now: str, capsys: pytest.CaptureFixture[str],
              monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    code, out, err = run_cli(["scan", "--demo", "--now", now, "--history", history, "-q",
                              "-f", "json"], capsys, monkeypatch)
    assert code in (0, 1), err
    report: dict[str, Any] = json.loads(out)
    return report


def history_json(history: str, capsys: pytest.CaptureFixture[str],
                 monkeypatch: pytest.MonkeyPatch, *extra: str) -> list[dict[str, Any]]:
    code, out, err = run_cli(["history", "--history", history, "--format", "json", *extra],
                             capsys, monkeypatch)
    assert code == 0, err
    runs: list[dict[str, Any]] = json.loads(out)["runs"]
    return runs


def test_two_scans_give_a_trend_and_a_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    history = f"sqlite:///{tmp_path / 'runs.db'}"
    night = scan_into(history, NIGHT, capsys, monkeypatch)
    day = scan_into(history, DAY, capsys, monkeypatch)
    first, second = history_json(history, capsys, monkeypatch)
    assert [first["failed"], second["failed"]] == [night["summary"]["failed"],
                                                   day["summary"]["failed"]]
    assert second["savings_usd"] == day["summary"]["savings_usd"]
    assert len(first["new"]) == first["failed"] and not first["fixed"]
    fixed = {(f["policy"], f["resource"]) for f in second["fixed"]}
    day_failing = {(f["policy"], f["resource"]["id"]) for f in day["findings"]
                   if f["result"] == "fail"}
    night_failing = {(f["policy"], f["resource"]["id"]) for f in night["findings"]
                     if f["result"] == "fail"}
    assert fixed == night_failing - day_failing and fixed
    assert {p for p, _ in fixed} == {"gpu-off-hours-shutdown"}
    assert len(second["open"]) == len(night_failing & day_failing)
    assert second["by_policy"].get("gpu-off-hours-shutdown") is None
    only_day = history_json(history, capsys, monkeypatch, "--since", DAY)
    assert [run["at"] for run in only_day] == [second["at"]]


def test_check_plan_records_its_resources(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    history = str(tmp_path / "runs.db")
    plan = REPO / "tests" / "fixtures" / "plans" / "aws-gpu-plan.json"
    run_cli(["check-plan", str(plan), "--history", history, "--now", DAY], capsys, monkeypatch)
    code, out, err = run_cli(["what-if", "--history", history, "--format", "json"],
                             capsys, monkeypatch)
    assert code == 0, err
    (run,) = json.loads(out)["runs"]
    assert run["command"] == "check-plan"
    assert run["candidate"]["failed"] == run["stored"]["failed"] > 0


def test_stricter_candidate_finds_more(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    history = str(tmp_path / "runs.db")
    scan_into(history, NIGHT, capsys, monkeypatch)
    scan_into(history, DAY, capsys, monkeypatch)
    strict = tmp_path / "strict.yaml"
    strict.write_text(STRICT)
    current = [arg for path in demo_policy_paths() for arg in ("--policies", path)]

    def what_if(*extra: str) -> dict[str, Any]:
        code, out, err = run_cli(["what-if", "--history", history, "--format", "json",
                                  "--max-actions", "3", *current, *extra], capsys, monkeypatch)
        assert code == 0, err
        result: dict[str, Any] = json.loads(out)
        return result

    same, stricter = what_if(), what_if("--policies", str(strict))
    assert same["total"]["candidate"] == {**same["total"]["candidate"],
                                          "failed": same["total"]["stored"]["failed"]}
    assert same["total"]["candidate"]["savings_usd"] == same["total"]["stored"]["savings_usd"]
    assert stricter["total"]["candidate"]["failed"] > same["total"]["candidate"]["failed"]
    assert (stricter["total"]["candidate"]["savings_usd"]
            > same["total"]["candidate"]["savings_usd"])
    assert all(row["candidate"]["actions"] <= 3 for row in stricter["runs"])


@pytest.mark.parametrize("content", [b"not a database\n", b"SQLite format 3\x00" + b"\xff" * 500])
def test_corrupt_history_is_one_line_exit_2(tmp_path: Path, content: bytes,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(content)
    for command in ("history", "what-if"):
        code, out, err = run_cli([command, "--history", str(path)], capsys, monkeypatch)
        assert code == 2 and not out
        assert err.count("\n") == 1 and err.startswith("gpuwarden: error:")


def test_damaged_row_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.db"
    scan_into(str(path), DAY, capsys, monkeypatch)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE runs SET report = ?", ("[" * 100_000,))
    connection.close()
    code, _, err = run_cli(["history", "--history", str(path)], capsys, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "damaged" in err


def test_s3_history_partitions_by_date(aws: AwsLab, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="gpuwarden-history")
    history = "s3://gpuwarden-history/runs/"
    scan_into(history, NIGHT, capsys, monkeypatch)
    scan_into(history, DAY, capsys, monkeypatch)
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket="gpuwarden-history",
                                                       Prefix="runs/")["Contents"]]
    assert sorted(key.split("/")[1] for key in keys) == ["date=2026-06-08", "date=2026-06-09"]
    assert all(key.startswith("runs/date=") and key.endswith(".json") for key in keys)
    first, second = history_json(history, capsys, monkeypatch)
    assert len(first["new"]) == first["failed"] > 0
    assert second["fixed"] and {f["policy"] for f in second["fixed"]} == {
        "gpu-off-hours-shutdown"}
    assert [run["at"] for run in history_json(history, capsys, monkeypatch, "--since", DAY)
            ] == [second["at"]]
    s3.put_object(Bucket="gpuwarden-history", Key="runs/date=2026-06-10/run-x.json", Body=b"[")
    code, _, err = run_cli(["history", "--history", history], capsys, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "damaged" in err
    code, _, err = run_cli(["history", "--history", "s3://no-such-bucket/p/"],
                           capsys, monkeypatch)
    assert code == 2 and "NoSuchBucket" in err
