"""A whole AWS Organization in the Terraform modules and the Lambda function.

- scheduled-enforcement with `organization_role_name`: the function's role may list the
  organization's accounts (exactly the actions `engine.sources.aws.organization` declares) and
  assume that role name, and only then; the function reads GPUWARDEN_ORGANIZATION_ROLE;
- fan-out with `organization`: its first state asks the function for the targets
  (`{"discover": "organization"}`) and each event gets `event_overrides` (a plan with moto and the
  local provider mirror, as in tests/test_scheduled_enforcement_tf.py);
- the function's discover event lists the same accounts as `scan --organization` (moto), and
  a scan through the Lambda's settings calls only declared IAM actions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine import lambda_handler
from engine.core.errors import InputError
from engine.lambda_config import parse_run_config
from engine.sources.aws import discovery, inventory, organization
from tests.conftest_aws import (
    ACCOUNT,
    EAST,
    WEST,
    AwsLab,
    aws_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
)
from tests.test_iam_permissions import Recorder
from tests.test_organizations_aws import ROLE_NAME, Org, org_fixture  # noqa: F401
from tests.test_scheduled_enforcement_tf import (
    FAN_OUT,
    MODULE,
    PLUGIN_DIR,
    SERVICES,
    TF_ROOT,
    _StepFunctionsValidator,
    _terraform_env,
    blocks_of,
    parse_dir,
)

ENVIRONMENT = {"GPUWARDEN_ORGANIZATION_ROLE": ROLE_NAME, "AWS_REGION": EAST}


# ---------------------------------------------------------------------------- HCL


def function_statements() -> dict[str, dict[str, Any]]:
    function = blocks_of(parse_dir(MODULE), "data", "aws_iam_policy_document")["function"]
    return {d["statement"]["content"][0]["sid"]: d["statement"] for d in function["dynamic"]
            if "statement" in d and "sid" in d["statement"]["content"][0]}


def test_the_function_lists_accounts_and_assumes_the_role_only_for_an_organization() -> None:
    found = function_statements()
    listing, assuming = found["ListOrganizationAccounts"], found["AssumeOrganizationRoles"]
    enabled = "var.organization_role_name != null ? "
    assert listing["for_each"].startswith("${" + enabled)
    assert assuming["for_each"] == "${" + enabled + "[var.organization_role_name] : []}"
    assert listing["content"][0]["actions"] == "${statement.value}"
    assert assuming["content"][0]["actions"] == sorted(discovery.IAM.assumes())
    assert assuming["content"][0]["resources"] == ["arn:${local.p}:iam::*:role/${statement.value}"]
    module = parse_dir(MODULE)
    (granted,) = [block["organization_actions"] for block in module["locals"]
                  if "organization_actions" in block]
    assert set(granted) == organization.IAM.reads() == {"organizations:ListAccounts"}
    # never in the scan document the member roles get
    (read_only,) = [block["read_only_actions"] for block in module["locals"]
                    if "read_only_actions" in block]
    assert not set(granted) & set(read_only)
    assert "GPUWARDEN_ORGANIZATION_ROLE = var.organization_role_name" in (
        MODULE / "main.tf").read_text("utf-8")


def test_an_organization_scan_calls_only_declared_actions(aws: AwsLab, org: Org,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """Through the Lambda's own settings: listing, assuming and the inventory reads, nothing
    else; and the listing is called."""
    recorder = Recorder()
    recorder.install(monkeypatch)
    config = parse_run_config({"regions": [EAST], "now": "2026-12-01T03:00:00+00:00"},
                              ENVIRONMENT)
    recorder.on = True
    request = lambda_handler.scan_request(config, config.now, tmp_path / "audit.jsonl", None)
    from engine.pipeline import run_scan

    result = run_scan(request)
    recorder.on = False
    scanned = {a.account_id for a in result.collected.clients["aws"].accounts}
    assert scanned == {ACCOUNT, *org.active}
    assert {r.account for r in result.collected.resources} == set(org.active)
    declared = (inventory.read_actions() | discovery.IAM.reads() | discovery.IAM.assumes()
                | discovery.IAM.ungated() | organization.IAM.reads())
    assert recorder.actions <= declared, sorted(recorder.actions - declared)
    assert {"organizations:ListAccounts", "sts:AssumeRole"} <= recorder.actions


# ---------------------------------------------------------------------------- the function


def test_the_discover_event_lists_one_event_per_account_and_region(aws: AwsLab, org: Org,
                                                                   monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    answer = lambda_handler.handler({"discover": "organization", "regions": [EAST, WEST]}, None)
    targets = answer["targets"]
    assert {(t["account"], t["regions"][0]) for t in targets} == {
        (account, region) for account in (ACCOUNT, *org.active) for region in (EAST, WEST)}
    own = [t for t in targets if t["account"] == ACCOUNT]
    assert all(t["organization"] is False and "role_arn" not in t for t in own)
    members = [t for t in targets if t["account"] != ACCOUNT]
    assert {t["role_arn"] for t in members} == {
        f"arn:aws:iam::{a}:role/{ROLE_NAME}" for a in org.active}
    # each event is one the function accepts, and scans one account
    for target in targets:
        config = parse_run_config(target, ENVIRONMENT)
        assert config.organization_role is None and config.regions == tuple(target["regions"])


def test_the_function_scans_the_organization_and_sums_up_per_account(
    aws: AwsLab, org: Org, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    summary = lambda_handler.handler({"regions": [EAST], "now": "2026-12-01T03:00:00+00:00"},
                                     None)
    assert "error" not in summary, summary
    assert sorted(summary["regions_scanned"]) == sorted(
        f"{account}/{EAST}" for account in (ACCOUNT, *org.active))
    assert set(summary["by_account"]) == set(org.active)
    assert sum(summary["by_account"].values()) == summary["findings"]


@pytest.mark.parametrize(("event", "environment", "message"), [
    ({"discover": "organization"}, {}, "has no GPUWARDEN_ORGANIZATION_ROLE"),
    ({"discover": "everything"}, ENVIRONMENT, "is not organization"),
    ({"organization": "yes"}, ENVIRONMENT, "must be true or false"),
    ({}, {**ENVIRONMENT, "GPUWARDEN_ROLE_ARNS": "arn:aws:iam::111122223333:role/x"},
     "give one of them"),
    ({}, {"GPUWARDEN_ORGANIZATION_ROLE": "bad name"}, "is not an IAM role name"),
])
def test_bad_organization_settings_are_one_line(event: dict[str, Any], environment: dict[str, str],
                                                message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_run_config(event, environment)


def test_the_environment_role_scans_the_organization_unless_the_event_names_accounts() -> None:
    assert parse_run_config({}, ENVIRONMENT).organization_role == ROLE_NAME
    assert parse_run_config({"organization": False}, ENVIRONMENT).organization_role is None
    role = {"role_arn": "arn:aws:iam::111122223333:role/gpuwarden-scan"}
    assert parse_run_config(role, ENVIRONMENT).organization_role is None


# ---------------------------------------------------------------------------- terraform plan

FAN_OUT_ORGANIZATION = """
module "fan_out_organization" {{
  source          = "{fan_out}"
  name            = "gw-org"
  function_arn    = "arn:aws:lambda:us-east-1:123456789012:function:gw-org"
  organization    = {{ regions = ["us-east-1", "eu-west-1"] }}
  event_overrides = {{ max_actions = 2 }}
}}

module "org" {{
  source                 = "{module}"
  name                   = "gw-org"
  package_path           = "${{path.root}}/package.zip"
  report_bucket_name     = "gw-org-reports"
  create_schedule        = false
  organization_role_name = "gpuwarden-scan"
}}
"""


def test_the_fan_out_asks_the_function_for_the_organization(tmp_path: Path) -> None:
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not installed")
    if not (PLUGIN_DIR / "registry.terraform.io" / "hashicorp" / "aws").is_dir():
        pytest.skip(f"no local AWS provider mirror at {PLUGIN_DIR}")
    import zipfile

    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    validator = ThreadingHTTPServer(("127.0.0.1", 0), _StepFunctionsValidator)
    threading.Thread(target=validator.serve_forever, daemon=True).start()
    _StepFunctionsValidator.received.clear()
    try:
        host, port = server.get_host_and_port()
        (tmp_path / "terraformrc").write_text("", "utf-8")
        with zipfile.ZipFile(tmp_path / "package.zip", "w") as package:
            package.writestr("engine/lambda_handler.py", "")
        endpoints = "\n".join([*(f'    {s} = "http://{host}:{port}"' for s in SERVICES),
                               f'    sfn = "http://127.0.0.1:{validator.server_address[1]}"'])
        root = TF_ROOT.format(endpoints=endpoints, module=MODULE.as_posix(),
                              fan_out=FAN_OUT.as_posix())
        root += FAN_OUT_ORGANIZATION.format(fan_out=FAN_OUT.as_posix(), module=MODULE.as_posix())
        (tmp_path / "main.tf").write_text(root, "utf-8")
        env = _terraform_env(tmp_path)
        for command in (["terraform", "init", "-backend=false", f"-plugin-dir={PLUGIN_DIR}",
                         "-input=false"],
                        ["terraform", "plan", "-refresh=false", "-input=false", "-out=plan.bin"]):
            done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=300, check=False)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        shown = json.loads(subprocess.run(["terraform", "show", "-json", "plan.bin"],
                                          cwd=tmp_path, env=env, capture_output=True,
                                          text=True, timeout=120, check=True).stdout)
        validated = list(_StepFunctionsValidator.received)
    finally:
        # the validator's record is shared with tests/test_scheduled_enforcement_tf.py's plan
        _StepFunctionsValidator.received.clear()
        validator.shutdown()
        server.stop()
    machines = {c["address"]: json.loads(c["change"]["after"]["definition"])
                for c in shown["resource_changes"]
                if c["type"] == "aws_sfn_state_machine"}
    definition = machines["module.fan_out_organization.aws_sfn_state_machine.this"]
    assert definition in validated
    targets = definition["States"]["Targets"]
    assert targets["Type"] == "Task"
    assert targets["Parameters"]["Payload"] == {"discover": "organization",
                                                "regions": ["us-east-1", "eu-west-1"]}
    assert targets["ResultSelector"] == {"targets.$": "$.Payload.targets",
                                         "overrides": {"max_actions": 2}}
    scan_each = definition["States"]["ScanEachTarget"]
    assert scan_each["ItemSelector"] == {
        "event.$": "States.JsonMerge($$.Map.Item.Value, $.overrides, false)"}
    scan = scan_each["ItemProcessor"]["States"]["Scan"]
    assert scan["Parameters"]["Payload.$"] == "$.event"
    # the listed-targets module is as before: a Pass state, no selector
    listed = machines["module.fan_out.aws_sfn_state_machine.this"]
    assert listed["States"]["Targets"]["Type"] == "Pass"
    assert "ItemSelector" not in listed["States"]["ScanEachTarget"]
    environment = [c["change"]["after"]["environment"][0]["variables"]
                   for c in shown["resource_changes"]
                   if c["address"] == "module.org.aws_lambda_function.this"]
    assert environment[0]["GPUWARDEN_ORGANIZATION_ROLE"] == "gpuwarden-scan"
