"""Golden outputs: the JSON reports of the demo, the shipped plans, the public manifests and a
generated 5,000-change plan, pinned byte for byte.

Speed work must not change a single finding. Each case runs the CLI in process with a fixed
clock and compares the report (without `generated_at`) with the file under
`tests/data/golden/`. Small reports are stored whole so a failure shows a readable diff; the
generated plan's report is stored as its SHA-256 beside its summary.

A deliberate change of results regenerates them: `GPUWARDEN_UPDATE_GOLDEN=1 pytest
tests/test_golden_outputs.py`, and the diff of `tests/data/golden/` goes in the same commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REFERENCE, run_cli

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "data" / "golden"
NOW = "2026-06-17T14:30:00Z"
UPDATE = os.environ.get("GPUWARDEN_UPDATE_GOLDEN") == "1"

sys.path.insert(0, str(REPO / "bench"))
from gen_plan import generate_plan, write_plan  # noqa: E402
from gen_snapshot import generate_snapshot, write_snapshot  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    hashed: bool = False


def _plan_cases() -> list[Case]:
    plans = sorted((REFERENCE / "terraform-plans").glob("*.json"))
    plans.append(REPO / "tests" / "data" / "terraform-capacity" / "plan.json")
    return [Case(f"plan-{path.parent.name}-{path.stem}",
                 ("check-plan", str(path), "--format", "json", "--now", NOW)) for path in plans]


CASES: list[Case] = [
    Case("demo", ("scan", "--demo", "--format", "json", "--now", NOW)),
    Case("demo-offhours", ("scan", "--demo", "--format", "json", "--now", "2026-06-17T23:30:00Z")),
    *_plan_cases(),
    Case("manifests", ("check-manifests", str(REPO / "tests" / "data" / "manifests"),
                       "--format", "json", "--now", NOW)),
]


def run_report(args: tuple[str, ...], capsys: pytest.CaptureFixture[str],
               monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    code, out, err = run_cli(list(args), capsys, monkeypatch)
    assert code in (0, 1), err
    report: dict[str, Any] = json.loads(out)
    report.pop("generated_at", None)
    assert_counts_in_report_order(report)
    return report


def assert_counts_in_report_order(report: dict[str, Any]) -> None:
    """The summary lists each count in the order its key first appears among the failing and
    unknown findings (the canonical text sorts keys: this is the order the JSON shows)."""
    firsts: dict[str, dict[str, None]] = {"policy": {}, "severity": {}, "account": {}}
    for finding in report["findings"]:
        if finding["result"] != "pass":
            firsts["policy"].setdefault(finding["policy"], None)
            firsts["severity"].setdefault(finding["severity"], None)
            if finding["resource"].get("account"):
                firsts["account"].setdefault(finding["resource"]["account"], None)
    summary = report["summary"]
    assert list(summary["by_policy"]) == list(firsts["policy"])
    assert list(summary["by_severity"]) == list(firsts["severity"])
    assert list(summary.get("by_account", {})) == list(firsts["account"])


def canonical(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def compare_whole(name: str, text: str, *, update: bool = UPDATE) -> None:
    path = GOLDEN / f"{name}.json"
    if update or not path.exists():
        assert update, f"{path} is missing: run with GPUWARDEN_UPDATE_GOLDEN=1 to create it"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name}: the report changed"


def compare_hashed(name: str, report: dict[str, Any]) -> None:
    text = canonical(report)
    pinned = {"sha256": hashlib.sha256(text.encode()).hexdigest(), "summary": report["summary"]}
    path = GOLDEN / f"{name}.digest.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert report["summary"] == stored["summary"], f"{name}: the summary changed"
    assert pinned["sha256"] == stored["sha256"], f"{name}: a finding changed (summary equal)"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_report_is_unchanged(case: Case, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    report = run_report(case.args, capsys, monkeypatch)
    assert report["findings"] or case.name.startswith("plan-"), "a golden case that finds nothing"
    compare_whole(case.name, canonical(report))


@pytest.fixture(scope="module")
def generated_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("golden") / "plan-5000.json"
    write_plan(path, generate_plan(changes=5000, seed=42))
    return path


def test_generated_5000_change_plan_is_unchanged(generated_plan: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    report = run_report(("check-plan", str(generated_plan), "--format", "json", "--now", NOW),
                        capsys, monkeypatch)
    assert report["summary"]["findings"] > 1000
    compare_hashed("plan-generated-5000", report)


@pytest.fixture(scope="module")
def generated_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("golden") / "snapshot-3000.json"
    write_snapshot(path, generate_snapshot(resources=3000, seed=42))
    return path


def test_generated_3000_resource_snapshot_is_unchanged(generated_snapshot: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    report = run_report(("scan", "--source", f"snapshot:{generated_snapshot}", "--format",
                         "json", "--now", NOW), capsys, monkeypatch)
    assert report["summary"]["resources"] == 3000 and report["summary"]["findings"] > 1000
    compare_hashed("snapshot-generated-3000", report)


def test_a_changed_finding_fails_the_comparison() -> None:
    report = json.loads((GOLDEN / "demo.json").read_text(encoding="utf-8"))
    report["findings"][0]["estimated_monthly_usd"] = -1
    with pytest.raises(AssertionError, match="the report changed"):
        compare_whole("demo", canonical(report), update=False)
