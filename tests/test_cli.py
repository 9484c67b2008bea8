"""The CLI contract: commands, formats, exit codes 0/1/2, one-line errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.demo import demo_policy_paths, demo_snapshot_path
from tests import test_kubernetes_live as kubernetes_live
from tests.conftest import OFF_HOURS, REFERENCE, run_cli

GPU_PLAN: dict[str, Any] = {
    "format_version": "1.2",
    "terraform_version": "1.9.8",
    "resource_changes": [
        {
            "address": "aws_instance.gpu",
            "mode": "managed",
            "type": "aws_instance",
            "name": "gpu",
            "provider_name": "registry.terraform.io/hashicorp/aws",
            "change": {
                "actions": ["create"],
                "before": None,
                "after": {"instance_type": "g5.xlarge", "tags": {"team": "a"},
                          "tags_all": {"team": "a", "project": "p", "cost-center": "c"}},
                "after_unknown": {"id": True},
                "after_sensitive": {},
            },
        }
    ],
}



@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(GPU_PLAN))
    return path


def test_check_plan_fails_on_deny_findings(plan_file: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli(["check-plan", str(plan_file), "-f", "json"], capsys, monkeypatch)
    assert code == 1
    report = json.loads(out)
    failed = [f for f in report["findings"] if f["result"] == "fail"]
    assert [f["policy"] for f in failed] == ["gpu-spot-required"]
    assert failed[0]["resource"]["id"] == "aws_instance.gpu"
    # the root volume's encryption depends on the account default: unknown, not gating
    [unknown] = [f for f in report["findings"] if f["result"] == "unknown"]
    assert unknown["policy"] == "encryption-at-rest"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--soft-fail"], 0),
        (["--fail-on", "critical"], 0),  # the spot finding is high
        (["--fail-on", "high"], 1),
    ],
)
def test_gating_options(plan_file: Path, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch, extra: list[str], expected: int) -> None:
    code, _, _ = run_cli(["check-plan", str(plan_file), *extra], capsys, monkeypatch)
    assert code == expected


def test_unknown_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    plan = json.loads(json.dumps(GPU_PLAN))
    change = plan["resource_changes"][0]["change"]
    del change["after"]["instance_type"]
    change["after_unknown"]["instance_type"] = True
    path = tmp_path / "unknown.json"
    path.write_text(json.dumps(plan))
    code, out, _ = run_cli(["check-plan", str(path), "-f", "json"], capsys, monkeypatch)
    assert code == 0
    assert {f["result"] for f in json.loads(out)["findings"]} == {"unknown"}
    code, _, _ = run_cli(["check-plan", str(path), "--unknown", "fail"], capsys, monkeypatch)
    assert code == 1
    code, out, _ = run_cli(["check-plan", str(path), "--unknown", "pass", "-f", "json"],
                           capsys, monkeypatch)
    assert code == 0 and json.loads(out)["findings"] == []


def test_baseline_accepts_existing_findings(plan_file: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = tmp_path / "baseline.json"
    code, _, _ = run_cli(["check-plan", str(plan_file), "--write-baseline", str(baseline)],
                         capsys, monkeypatch)
    assert code == 1
    assert json.loads(baseline.read_text())["accepted"] == [
        {"policy": "encryption-at-rest", "resource": "aws_instance.gpu.root_block_device[0]"},
        {"policy": "gpu-spot-required", "resource": "aws_instance.gpu"}]
    code, out, _ = run_cli(["check-plan", str(plan_file), "--baseline", str(baseline), "-f",
                            "json"], capsys, monkeypatch)
    assert code == 0
    assert json.loads(out)["summary"]["baselined"] == 2


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty"),
        (b'{"format_version": "1.2", "resource_changes": [', "JSON"),
        (b"PK\x03\x04binary-plan", "binary"),
        (b'{"format_version": "1.0", "values": {"root_module": {}}}', "state"),
        (b'{"format_version": "9.0", "resource_changes": []}', "format_version"),
        (b"not json at all", "JSON"),
    ],
)
def test_bad_plans_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch, content: bytes,
                                        fragment: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    code, out, err = run_cli(["check-plan", str(path)], capsys, monkeypatch)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert str(path) in err
    assert fragment.lower() in err.lower()
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [
        ["check-plan", "/nonexistent/plan.json"],
        ["check-plan", "PLAN", "--format", "yaml"],
        ["check-plan", "PLAN", "--now", "yesterday"],
        ["check-plan", "PLAN", "--policies", "/nonexistent.yaml"],
        ["check-plan", "PLAN", "--no-such-option"],
        ["check-plan", "PLAN", "--fail-on", "huge"],
        ["scan"],
        ["scan", "--source", "snapshot:/nonexistent.yaml"],
        ["scan", "--source", "aws"],
        ["policies", "show", "no-such-policy"],
    ],
)
def test_usage_and_input_errors_exit_2(args: list[str], plan_file: Path,
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    args = [str(plan_file) if a == "PLAN" else a for a in args]
    code, _, err = run_cli(args, capsys, monkeypatch)
    assert code == 2
    assert "Traceback" not in err
    assert err.strip()


def test_plan_from_stdin(plan_file: Path, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(plan_file.read_bytes())))
    code, out, _ = run_cli(["check-plan", "-", "-f", "json"], capsys, monkeypatch)
    assert code == 1
    assert json.loads(out)["findings"][0]["policy"] == "gpu-spot-required"


def test_demo_scan_reports_findings_and_dollars(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli(["scan", "--demo", "--now", "2026-12-01T03:00:00Z", "-f", "json"],
                           capsys, monkeypatch)
    assert code == 1
    report = json.loads(out)
    assert report["mode"] == "dry-run"
    policies = set(report["summary"]["by_policy"])
    assert {"gpu-spot-required", "required-cost-tags", "encryption-at-rest",
            "gpu-mig-for-small-jobs", "gpu-off-hours-shutdown"} <= policies
    assert report["summary"]["estimated_monthly_usd"] > 10_000
    kinds = {f["resource"]["provider"] for f in report["findings"]}
    assert {"aws", "gcp", "azure", "kubernetes"} <= kinds


def test_demo_table_says_what_to_do(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli(["scan", "--demo", "--soft-fail"], capsys, monkeypatch)
    assert code == 0
    assert "gpu-spot-required" in out
    assert "$" in out


def test_snapshot_source_reads_the_demo_bundle(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["--now", "2026-12-01T12:00:00Z", "-f", "json"]
    _, demo, _ = run_cli(["scan", "--demo", *args], capsys, monkeypatch)
    policies = [arg for path in demo_policy_paths() for arg in ("--policies", path)]
    _, snap, _ = run_cli(["scan", "--source", f"snapshot:{demo_snapshot_path()}", *policies,
                          *args], capsys, monkeypatch)
    assert json.loads(demo)["findings"] == json.loads(snap)["findings"]


def test_policies_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli(["policies", "list"], capsys, monkeypatch)
    assert code == 0 and len(out.strip().splitlines()) == 14
    code, out, _ = run_cli(["policies", "show", "gpu-idle"], capsys, monkeypatch)
    assert code == 0 and "threshold_pct: 5" in out
    code, out, _ = run_cli(["policies", "schema"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["title"] == "gpuwarden policy file"
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies:\n  - id: x1\n    title: t\n    severity: low\n"
                   "    resources: [instance]\n    violation: {field: name, op: inn, value: 1}\n"
                   "    message: m\n")
    code, _, err = run_cli(["policies", "validate", str(bad)], capsys, monkeypatch)
    assert code == 2
    assert f"{bad}:6: policy x1: unknown operator 'inn'" in err


def test_offhours_command(capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli(["offhours", "off=(M-F,19);on=(M-F,7);tz=pt", "--at",
                            "2026-12-01T03:00:00Z", "--format", "json"], capsys, monkeypatch)
    assert code == 0
    explained = json.loads(out)
    assert explained["valid"] is True and explained["state"] == "off"
    assert explained["next_transitions"][0]["state"] == "on"
    code, _, err = run_cli(["offhours", "off=(M-F,25)"], capsys, monkeypatch)
    assert code == 2 and "25" in err


def test_python_dash_m_entry_point(plan_file: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "engine", "check-plan", str(plan_file), "--format", "sarif"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 1
    assert json.loads(result.stdout)["version"] == "2.1.0"


def test_reference_plans_all_check_cleanly(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    plans = sorted((REFERENCE / "terraform-plans").glob("*.json"))
    assert len(plans) >= 16
    for plan in plans:
        code, out, err = run_cli(["check-plan", str(plan), "-f", "json"], capsys, monkeypatch)
        assert code in (0, 1), (plan.name, err)
        assert json.loads(out)["schema"] == "gpuwarden.report/v1"


def test_several_plans_in_one_check(plan_file: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    second = tmp_path / "second.json"
    plan = json.loads(json.dumps(GPU_PLAN))
    plan["resource_changes"][0]["address"] = "aws_instance.other"
    second.write_text(json.dumps(plan))
    code, out, _ = run_cli(["check-plan", str(plan_file), str(second), "-f", "json"],
                           capsys, monkeypatch)
    assert code == 1
    spot = {f["resource"]["id"] for f in json.loads(out)["findings"]
            if f["policy"] == "gpu-spot-required"}
    assert spot == {"aws_instance.gpu", "aws_instance.other"}


def test_usage_errors_are_one_line(plan_file: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run_cli(["check-plan", str(plan_file), "--no-such-option"], capsys,
                           monkeypatch)
    assert code == 2
    assert err.strip() == ("gpuwarden: error: No such option: --no-such-option "
                           "(see 'gpuwarden check-plan --help')")


# ---------------------------------------------------------------------------- output formats


@pytest.mark.parametrize("command", ["check-plan", "scan"])
def test_the_format_option_offers_exactly_the_registered_formats(
    command: str, plan_file: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.outputs.registry import FORMATS

    target = [str(plan_file)] if command == "check-plan" else ["--demo"]
    for fmt in FORMATS:
        code, out, err = run_cli([command, *target, "-f", fmt, "--now",
                                  "2026-12-01T12:00:00Z"], capsys, monkeypatch)
        assert code == 1 and out and err == "", fmt
    code, _, err = run_cli([command, *target, "-f", "yaml"], capsys, monkeypatch)
    assert code == 2 and err.strip() == ("gpuwarden: error: --format: 'yaml' is not one of "
                                         + ", ".join(FORMATS))


# ---------------------------------------------------------------------------- --deadline

# The live-cluster tests' fixtures: a fake Kubernetes API on loopback, its kubeconfig.
fake_api = kubernetes_live.fake_api
kubeconfig = kubernetes_live.kubeconfig


def deadline_scan(config_file: Path, audit: Path, *extra: str) -> list[str]:
    return ["scan", "--source", "k8s", "--kubeconfig", str(config_file), "-f", "json",
            "--now", OFF_HOURS.isoformat(), "--enforce", "--audit-log", str(audit), *extra]


def test_no_action_starts_past_the_deadline(
    fake_api: Any, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from remediations.runner import DEADLINE_REACHED

    api, _ = fake_api
    audit = tmp_path / "audit.jsonl"
    code, out, _ = run_cli(deadline_scan(kubeconfig, audit, "--deadline", "0"), capsys,
                           monkeypatch)

    assert code == 1 and not api.mutations()
    report = json.loads(out)
    late = {f["resource"]["id"]: f["remediation"] for f in report["findings"]
            if f["policy"] == "gpu-off-hours-shutdown" and f["resource"]["kind"] != "Pod"}
    assert set(late) == {"Deployment/ml/trainer-a", "StatefulSet/ml/notebook",
                         "CronJob/ml/nightly"}
    assert all(r["status"] == "skipped" and r["detail"] == DEADLINE_REACHED
               for r in late.values())
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["phase"], r["reason"]) for r in records] == [("check", DEADLINE_REACHED)] * 3


def test_a_deadline_far_enough_lets_the_actions_run(
    fake_api: Any, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    code, out, _ = run_cli(deadline_scan(kubeconfig, tmp_path / "a.jsonl", "--deadline", "600"),
                           capsys, monkeypatch)

    assert code == 1 and len(api.mutations()) == 3
    statuses = {f["remediation"]["status"] for f in json.loads(out)["findings"]
                if f["policy"] == "gpu-off-hours-shutdown" and f["resource"]["kind"] != "Pod"}
    assert statuses == {"applied"}


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_a_bad_deadline_is_a_usage_error(value: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(["scan", "--source", "k8s", "--enforce", "--deadline", value],
                             capsys, monkeypatch)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "--deadline" in err
