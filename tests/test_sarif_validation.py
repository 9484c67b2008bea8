"""gpuwarden's SARIF checked by real consumers, offline:

1. the SARIF 2.1.0 JSON Schema shipped in npm `@microsoft/jest-sarif`, with python `jsonschema`;
2. Microsoft's SARIF Multitool (npm `@microsoft/sarif-multitool-linux`), `validate` with the SARIF
   rules and the GitHub code-scanning ingestion rules (`--rule-kind Sarif;Gh`).

Both are installed by scripts/install-sarif-tools.sh into .tools/node (or $GPUWARDEN_NODE_TOOLS).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from engine.core.model import Finding, Remediation, Report, ResourceRef, Severity, SourceLocation
from engine.outputs import PolicyMeta, RenderContext, sarif

REPO_ROOT = Path(__file__).resolve().parents[1]
INSTALL_HINT = "bash scripts/install-sarif-tools.sh installs them into .tools/node (needs npm)"
SCHEMA_PACKAGE = "node_modules/@microsoft/jest-sarif"
MULTITOOL = "node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool"


def node_tools() -> Path:
    configured = os.environ.get("GPUWARDEN_NODE_TOOLS")
    return Path(configured) if configured else REPO_ROOT / ".tools" / "node"


@pytest.fixture(scope="module")
def sarif_schema() -> dict[str, Any]:
    schemas = sorted((node_tools() / SCHEMA_PACKAGE).glob("lib/schemas/sarif-2.1.0*.json"))
    if not schemas:
        pytest.skip(f"SARIF 2.1.0 schema from @microsoft/jest-sarif not found: {INSTALL_HINT}")
    schema: dict[str, Any] = json.loads(schemas[-1].read_text(encoding="utf-8"))
    return schema


@pytest.fixture(scope="module")
def multitool() -> Path:
    binary = node_tools() / MULTITOOL
    if not binary.is_file():
        pytest.skip(f"SARIF Multitool not found at {binary}: {INSTALL_HINT}")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"SARIF Multitool at {binary} is not executable: {INSTALL_HINT}")
    return binary


def schema_errors(schema: dict[str, Any], log: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft4Validator(
        schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    )
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]


def run_multitool(binary: Path, log_file: Path, tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    """Validate one file; returns the console output and the validator's own result objects."""
    report = tmp_path / "validation.sarif"
    # A self-contained .NET binary: invariant globalization means it needs no libicu.
    env = {**os.environ, "DOTNET_SYSTEM_GLOBALIZATION_INVARIANT": "1", "DOTNET_NOLOGO": "1"}
    env["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1"
    command = [str(binary), "validate", str(log_file), "-o", str(report)]
    command += ["--log", "ForceOverwrite", "--rule-kind", "Sarif;Gh"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"Multitool exit {done.returncode}:\n{output}"
    assert report.is_file(), output
    results: list[dict[str, Any]] = json.loads(report.read_text(encoding="utf-8-sig"))["runs"][0][
        "results"
    ]
    return output, results


def finding(
    policy: str,
    resource_id: str,
    severity: Severity,
    result: str = "fail",
    *,
    location: SourceLocation | None = None,
    usd: float = 0.0,
    message: str = "",
) -> Finding:
    return Finding.model_validate(
        {
            "policy": policy,
            "severity": severity,
            "result": result,
            "resource": ResourceRef(
                provider="aws", kind="aws_instance", id=resource_id, name="gpu"
            ),
            "message": message or f"{policy} violated by {resource_id}",
            "enforcement": "deny",
            "estimated_monthly_usd": usd,
            "location": location,
            "remediation": Remediation(action="set-spot")
            if policy == "gpu-spot-required"
            else None,
        }
    )


def plan_check_context(source_file: str | None = "plans/gpu-plan.json") -> RenderContext:
    """A PR check's worth of findings: every severity, unknowns, a pass, odd paths and text."""
    findings = [
        finding(
            "gpu-spot-required",
            "module.train.aws_instance.gpu[0]",
            Severity.HIGH,
            location=SourceLocation(file="infra/modules/train/main.tf", line=14),
            usd=17_046.74,
        ),
        finding(
            "gpu-idle",
            'module.fleet["eu west"].aws_instance.gpu',
            Severity.CRITICAL,
            location=SourceLocation(file=".\\infra\\fleet dir\\main.tf"),
            usd=2_400,
            message="GPU activity 0.4% < 5% over 1h — 8x H100 idle; `stop` it",
        ),
        finding("required-cost-tags", "aws_instance.untagged", Severity.MEDIUM),
        finding("gpu-underutilized", "aws_instance.small", Severity.LOW, usd=310.25),
        finding("gpu-off-hours-shutdown", "aws_instance.notebook", Severity.INFO, usd=55),
        finding("encryption-at-rest", "aws_ebs_volume.data", Severity.HIGH, "unknown"),
        finding("gpu-mig-for-small-jobs", "Deployment/ml/infer", Severity.MEDIUM, "pass"),
        finding(
            "encryption-at-rest",
            "aws_s3_bucket.models",
            Severity.HIGH,
            location=SourceLocation(file="/abs/checkout/storage.tf", line=2),
        ),
    ]
    policies = {
        "gpu-spot-required": PolicyMeta(
            id="gpu-spot-required",
            title="GPU compute outside production runs on spot",
            description="Non-production GPU capacity must be spot or preemptible.",
            severity="high",
            help="Request spot capacity.",
            help_uri="https://example.invalid/policies#gpu-spot-required",
        )
    }
    report = Report(generated_at=datetime(2025, 3, 4, 12, tzinfo=UTC), findings=findings)
    return RenderContext(report=report, policies=policies, source_file=source_file)


# ---------------------------------------------------------------------------- JSON Schema


def test_sarif_is_valid_against_the_sarif_2_1_0_schema(sarif_schema: dict[str, Any]) -> None:
    log = json.loads(sarif.render(plan_check_context()))
    assert log["runs"][0]["results"], "the sample must produce results to validate"
    assert schema_errors(sarif_schema, log) == []


def test_sarif_without_a_source_file_is_still_schema_valid(sarif_schema: dict[str, Any]) -> None:
    log = json.loads(sarif.render(plan_check_context(source_file=None)))
    assert schema_errors(sarif_schema, log) == []


def test_sarif_of_an_empty_report_is_schema_valid(sarif_schema: dict[str, Any]) -> None:
    empty = RenderContext(report=Report(generated_at=datetime(2025, 1, 1, tzinfo=UTC)))
    log = json.loads(sarif.render(empty))
    assert log["runs"][0]["results"] == []
    assert schema_errors(sarif_schema, log) == []


def test_the_schema_check_rejects_broken_sarif(sarif_schema: dict[str, Any]) -> None:
    """Negative control: the validator is live, so a pass above means something."""
    log = json.loads(sarif.render(plan_check_context()))
    broken = copy.deepcopy(log)
    broken["runs"][0]["results"][0]["level"] = "fatal"
    del broken["runs"][0]["results"][1]["message"]
    broken["runs"][0]["results"][2]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    assert len(schema_errors(sarif_schema, broken)) >= 3


# ---------------------------------------------------------------------------- SARIF Multitool


def test_multitool_validates_the_sarif_for_github(multitool: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "gpuwarden.sarif"
    log_file.write_text(sarif.render(plan_check_context()), encoding="utf-8")
    output, results = run_multitool(multitool, log_file, tmp_path)

    assert ": error " not in output, output
    errors = [r for r in results if r.get("level", "warning") == "error"]
    assert errors == [], output


def test_multitool_reports_errors_in_broken_sarif(multitool: Path, tmp_path: Path) -> None:
    """Negative control: the Multitool run and our reading of it do catch a bad file."""
    log = json.loads(sarif.render(plan_check_context()))
    log["runs"][0]["results"][0]["unexpected"] = True
    del log["runs"][0]["results"][1]["locations"]
    del log["runs"][0]["tool"]["driver"]["rules"][0]["shortDescription"]
    log_file = tmp_path / "broken.sarif"
    log_file.write_text(json.dumps(log), encoding="utf-8")
    output, results = run_multitool(multitool, log_file, tmp_path)

    assert ": error " in output
    rule_ids = {r["ruleId"] for r in results if r.get("level", "warning") == "error"}
    assert "JSON1005" in rule_ids  # additional property
    assert any(rule_id.startswith("GH") for rule_id in rule_ids)  # GitHub ingestion rules ran
