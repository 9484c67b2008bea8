"""`check-plan` must not pay for provider SDKs: a real `python -m engine check-plan` run, with
`-X importtime` listing every module the process imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY_MODULES = ("boto3", "botocore", "google.cloud", "azure", "kubernetes", "pynvml",
                 "altair", "vl_convert")  # the HTML report's charts too

GPU_INSTANCE_CHANGE: dict[str, Any] = {
    "address": "aws_instance.trainer",
    "mode": "managed",
    "type": "aws_instance",
    "name": "trainer",
    "provider_name": "registry.terraform.io/hashicorp/aws",
    "change": {
        "actions": ["create"],
        "before": None,
        "after": {"instance_type": "p3.2xlarge", "tags": {"env": "dev"},
                  "tags_all": {"env": "dev"}},
        "after_unknown": {"id": True, "arn": True},
        "before_sensitive": False,
        "after_sensitive": {},
    },
}
PLANS: dict[str, dict[str, Any]] = {
    "gpu-instance": {"format_version": "1.2", "terraform_version": "1.7.5",
                     "resource_changes": [GPU_INSTANCE_CHANGE]},
    "empty": {"format_version": "1.2", "terraform_version": "1.7.5",
              "planned_values": {"root_module": {}}},
}


def imported_modules(importtime_stderr: str) -> set[str]:
    """Module names from `-X importtime` lines: `import time: self | cumulative | name`."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    names.discard("package")  # the header line
    return names


def heavy(names: set[str]) -> list[str]:
    """The provider SDKs (as listed in HEAVY_MODULES) that any of `names` belongs to."""
    return sorted(
        sdk for sdk in HEAVY_MODULES
        if any(name == sdk or name.startswith(sdk + ".") for name in names)
    )


def run_check_plan(plan: Path, report: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    command = [sys.executable, "-X", "importtime", "-m", "engine", "check-plan", str(plan),
               "--format", "json", "-o", str(report)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("plan_name", sorted(PLANS))
def test_check_plan_imports_no_provider_sdk(tmp_path: Path, plan_name: str) -> None:
    plan = tmp_path / "tfplan.json"
    plan.write_text(json.dumps(PLANS[plan_name]), "utf-8")
    report_path = tmp_path / "report.json"

    result = run_check_plan(plan, report_path)

    assert result.returncode in (0, 1), result.stderr[-2000:]
    # The run really evaluated the plan (not an early exit that imports nothing).
    report = json.loads(report_path.read_text("utf-8"))
    if PLANS[plan_name].get("resource_changes"):
        assert "gpu-spot-required" in {f["policy"] for f in report["findings"]}
    else:
        assert report["summary"]["resources"] == 0
    names = imported_modules(result.stderr)
    assert {"engine.cli", "engine.sources.terraform"} <= names
    assert heavy(names) == [], f"check-plan imported provider SDKs: {heavy(names)}"


def test_heavy_detection_sees_a_provider_sdk() -> None:
    """The filter itself: submodules count, look-alike names do not."""
    names = {"botocore.session", "azure", "google.protobuf", "kubernetes_validate", "json"}
    assert heavy(names) == ["azure", "botocore"]
    assert heavy({"google.cloud.compute_v1", "pynvml"}) == ["google.cloud", "pynvml"]
