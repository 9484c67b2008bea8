"""The GitHub Action's own scripts run, as a runner would run them, against a shipped plan.

action.yml is a composite action: its `run:` steps are bash scripts that GitHub runs with
`bash --noprofile --norc -eo pipefail FILE`, with the step's `env:` resolved from the inputs
(or their defaults) and from earlier steps' outputs, and with GITHUB_OUTPUT, RUNNER_TEMP,
GITHUB_STEP_SUMMARY and GITHUB_ACTION_PATH set. `ActionRunner` does that much, so the scripts
are tested byte for byte as they ship:

- the install step installs the action's own checkout into a fresh virtualenv (offline: pip
  may not reach an index, dependencies come from the test environment's site-packages, and
  hatchling must be installed since build isolation would download it);
- the check, summary and gate steps run for real on tests/fixtures/plans/aws-gpu-plan.json, and
  their exit codes, outputs, report file and job summary are asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

ACTION: dict[str, Any] = yaml.safe_load((REPO / "action.yml").read_text("utf-8"))
STEPS: dict[str, dict[str, Any]] = {step["name"]: step for step in ACTION["runs"]["steps"]}
INSTALL, CHECK, SUMMARY, GATE = ("Install gpuwarden", "Check the plan", "Write the job summary",
                                 "Gate on the check's exit code")
PLAN = REPO / "tests" / "fixtures" / "plans" / "aws-gpu-plan.json"
INPUT = re.compile(r"^\$\{\{ inputs\.([\w-]+) \}\}$")
CHECK_OUTPUT = re.compile(r"^\$\{\{ steps\.check\.outputs\.([\w-]+) \}\}$")
PR_COMMENT_MARKER = "<!-- gpuwarden-pr-comment -->"


@dataclass
class ActionRunner:
    """Runs the action's bash steps in `workspace` as an Actions runner would."""

    workspace: Path
    inputs: Mapping[str, str]
    path: str = ""  # prepended to PATH: where `python` and `gpuwarden` come from
    extra_env: Mapping[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def temp(self) -> Path:
        return self.workspace.parent / "runner-temp"

    @property
    def summary(self) -> Path:
        return self.temp / "step-summary.md"

    def run(self, name: str) -> subprocess.CompletedProcess[str]:
        step = STEPS[name]
        self.temp.mkdir(exist_ok=True)
        output_file = self.temp / f"output-{len(self.outputs)}-{step.get('id', 'step')}"
        output_file.write_text("", "utf-8")
        script = self.temp / "step.sh"
        script.write_text(step["run"], "utf-8")
        env = {**os.environ, **self.extra_env, **self.step_env(step),
               "GITHUB_ACTION_PATH": str(REPO), "GITHUB_OUTPUT": str(output_file),
               "GITHUB_STEP_SUMMARY": str(self.summary), "RUNNER_TEMP": str(self.temp),
               "PATH": os.pathsep.join(p for p in (self.path, os.environ["PATH"]) if p)}
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=self.workspace, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        if step.get("id") == "check":
            self.outputs.update(read_outputs(output_file))
        return done

    def step_env(self, step: Mapping[str, Any]) -> dict[str, str]:
        """The step's `env:` with its `${{ }}` expressions resolved."""
        resolved: dict[str, str] = {}
        for key, expression in (step.get("env") or {}).items():
            text = str(expression)
            if (named := INPUT.match(text)) is not None:
                resolved[key] = self.input(named[1])
            elif (produced := CHECK_OUTPUT.match(text)) is not None:
                resolved[key] = self.outputs.get(produced[1], "")
            else:
                raise AssertionError(f"{step['name']}: cannot resolve {key}: {text}")
        return resolved

    def input(self, name: str) -> str:
        spec = ACTION["inputs"][name]
        if name in self.inputs:
            return self.inputs[name]
        assert not spec.get("required"), f"input {name} is required"
        return str(spec.get("default", ""))

    def summary_runs(self) -> bool:
        """The summary step's `if:`: the check ran and the input was not bad."""
        return self.outputs.get("exit-code", "") not in ("", "2")


def read_outputs(path: Path) -> dict[str, str]:
    pairs = (line.partition("=") for line in path.read_text("utf-8").splitlines() if line)
    return {key: value for key, _, value in pairs}


def run_check(runner: ActionRunner) -> subprocess.CompletedProcess[str]:
    """The check, the summary (when its condition holds) and the gate, in order."""
    check = runner.run(CHECK)
    assert check.returncode == 0, check.stderr  # the check step itself never fails
    if runner.summary_runs():
        summary = runner.run(SUMMARY)
        assert summary.returncode == 0, summary.stderr
    return runner.run(GATE)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    shutil.copy(PLAN, root / "plan.json")
    return root


# ---------------------------------------------------------------------------- the check


def test_a_gating_plan_publishes_sarif_and_a_summary_then_fails_the_job(workspace: Path) -> None:
    runner = ActionRunner(workspace, {"plan": "plan.json"})
    gate = run_check(runner)
    assert runner.outputs["exit-code"] == "1"
    assert runner.outputs["report"] == "gpuwarden.sarif"
    assert runner.outputs["report-exists"] == "true"
    sarif = json.loads((workspace / "gpuwarden.sarif").read_text("utf-8"))
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["results"]
    assert runner.summary.read_text("utf-8").startswith(PR_COMMENT_MARKER)
    assert gate.returncode == 1


def test_soft_fail_reports_and_passes(workspace: Path) -> None:
    runner = ActionRunner(workspace, {"plan": "plan.json", "soft-fail": "true",
                                      "format": "json", "output": "out/report.json"})
    (workspace / "out").mkdir()
    gate = run_check(runner)
    assert runner.outputs["exit-code"] == "0"
    assert runner.outputs["report"] == "out/report.json"
    report = json.loads((workspace / "out" / "report.json").read_text("utf-8"))
    assert report["schema"] == "gpuwarden.report/v1" and report["summary"]["failed"] > 0
    assert gate.returncode == 0


def test_policies_input_is_split_into_repeated_options(workspace: Path) -> None:
    """`builtin overrides.yaml` (spaces or newlines) loads both; the override raising
    gpu-spot-required to critical makes `fail-on: critical` gate, and the summary step judges
    with the same options."""
    (workspace / "overrides.yaml").write_text(
        "overrides:\n  gpu-spot-required:\n    severity: critical\n", "utf-8")
    plain = ActionRunner(workspace, {"plan": "plan.json", "fail-on": "critical"})
    assert run_check(plain).returncode == 0
    assert plain.outputs["exit-code"] == "0"
    overridden = ActionRunner(workspace, {"plan": "plan.json", "fail-on": "critical",
                                          "policies": "builtin\n overrides.yaml"})
    assert run_check(overridden).returncode == 1
    assert overridden.outputs["exit-code"] == "1"
    summary = overridden.summary.read_text("utf-8")
    assert "gpu-spot-required" in summary and "critical" in summary


def test_bad_input_fails_without_a_stale_report_or_a_summary(workspace: Path) -> None:
    (workspace / "gpuwarden.sarif").write_text("stale", "utf-8")
    runner = ActionRunner(workspace, {"plan": "missing.json"})
    gate = run_check(runner)
    assert runner.outputs["exit-code"] == "2"
    assert "report-exists" not in runner.outputs
    assert not (workspace / "gpuwarden.sarif").exists()
    assert not runner.summary.exists()
    assert gate.returncode == 2


def test_every_format_gets_its_report_file(workspace: Path) -> None:
    from engine.outputs.registry import FORMATS

    extensions = {"sarif": "sarif", "json": "json", "junit": "xml", "markdown": "md",
                  "html": "html", "table": "txt", "policyreport": "yaml"}
    assert set(extensions) == set(FORMATS)  # a new output format needs its file extension here
    formats = ACTION["inputs"]["format"]["description"]
    for fmt, extension in extensions.items():
        assert fmt in formats
        runner = ActionRunner(workspace, {"plan": "plan.json", "format": fmt, "soft-fail": "true"})
        assert runner.run(CHECK).returncode == 0
        assert runner.outputs["report"] == f"gpuwarden.{extension}"
        assert (workspace / f"gpuwarden.{extension}").stat().st_size > 0, fmt


def test_run_scripts_take_inputs_only_through_the_environment() -> None:
    """`${{ }}` inside a script is pasted into the bash source before it runs (script
    injection); every input reaches the scripts as an environment variable instead."""
    for step in STEPS.values():
        assert "${{" not in step.get("run", ""), step["name"]


# ---------------------------------------------------------------------------- the install


def test_install_step_installs_the_action_checkout(workspace: Path, tmp_path: Path) -> None:
    pytest.importorskip("hatchling", reason="installing the checkout offline needs hatchling "
                                            "(pip install hatchling)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    offline = {"PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1",
               # pip reads this variable backwards: 0 turns build isolation off
               "PIP_NO_BUILD_ISOLATION": "0"}
    runner = ActionRunner(workspace, {"plan": "plan.json"}, path=str(venv / "bin"),
                          extra_env=offline)
    install = runner.run(INSTALL)
    assert install.returncode == 0, install.stderr
    located = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import engine; print(engine.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path)
    assert Path(located.stdout.strip()).is_relative_to(venv), "not installed into the venv"
    assert (venv / "bin" / "gpuwarden").is_file()
    assert run_check(runner).returncode == 1  # the installed copy, with its built-in pack
    assert runner.outputs["exit-code"] == "1"


def test_the_action_installs_nothing_from_a_package_index() -> None:
    assert "version" not in ACTION["inputs"]
    script = STEPS[INSTALL]["run"]
    installs = re.findall(r"pip install[^\n]*", script)
    assert installs and all('"$GITHUB_ACTION_PATH"' in line for line in installs), installs
