"""The scheduled-enforcement and fan-out Terraform modules, checked two ways.

1. Their HCL, parsed with python-hcl2: least privilege (no wildcard actions, mutating actions only
   behind var.enforce, production excluded by tag condition), the reports bucket (encrypted,
   versioned, public access blocked, TLS only, lifecycle), log retention, the schedule's time
   zone, and that the module and the Lambda handler agree on the environment variable names.
2. A real `terraform plan` of both modules (the AWS provider from a local plugin mirror, its API
   calls answered by moto on loopback), when terraform and the mirror are here: the rendered
   IAM policy for dry-run and enforce, gpuwarden's own `check-plan` rules over the plan, and the
   handler accepting exactly the events and environment the plan gives it.

3. checkov, when a `checkov` binary is on PATH (or named by GPUWARDEN_CHECKOV): it is not a test
   dependency (about a minute to install, with its own pins of boto3 and friends), so CI skips
   it; every check it fails must be one of the accepted ones below, each with its reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from engine import lambda_config, lambda_handler
from engine.core.errors import InputError

hcl2 = pytest.importorskip("hcl2")

REPO = Path(__file__).resolve().parents[1]
TERRAFORM = REPO / "terraform"
MODULE = TERRAFORM / "modules" / "scheduled-enforcement"
FAN_OUT = TERRAFORM / "modules" / "fan-out"
EXAMPLE = TERRAFORM / "examples" / "scheduled-enforcement"
PLUGIN_DIR = Path(os.environ.get("GPUWARDEN_TF_PLUGIN_DIR", "/opt/tf-plugins"))

MUTATING_ACTIONS = frozenset({
    "ec2:StopInstances", "ec2:CreateTags", "ec2:CreateSnapshot",
    "autoscaling:UpdateAutoScalingGroup", "autoscaling:CreateOrUpdateTags",
    "eks:UpdateNodegroupConfig", "eks:TagResource",
    "sagemaker:StopNotebookInstance", "sagemaker:AddTags",
    # resume at on-hours: what gpuwarden itself stopped (its mark) is started again
    "ec2:StartInstances", "ec2:DeleteTags", "autoscaling:DeleteTags", "eks:UntagResource",
    "sagemaker:StartNotebookInstance", "sagemaker:DeleteTags",
})
READ_ONLY = re.compile(r"^[a-z0-9-]+:(Describe|List|Get)[A-Za-z]+$")
PRODUCTION_VALUES = {"prod", "production"}


# ------------------------------------------------------------------------------ parsing helpers


def plain(value: Any) -> Any:
    """Parsed HCL without python-hcl2's bookkeeping: string quotes, block and comment markers."""
    if isinstance(value, dict):
        return {plain(key): plain(item) for key, item in value.items()
                if key not in ("__is_block__", "__comments__", "__inline_comments__")}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse_dir(directory: Path) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {}
    for path in sorted(directory.glob("*.tf")):
        with path.open(encoding="utf-8") as handle:
            for key, blocks in plain(hcl2.load(handle)).items():
                merged.setdefault(key, []).extend(blocks)
    return merged


def blocks_of(parsed: dict[str, list[Any]], section: str, kind: str) -> dict[str, Any]:
    """{name: body} of the `resource`/`data` blocks of one type."""
    found: dict[str, Any] = {}
    for block in parsed.get(section, []):
        for body in (block.get(kind) or {}, ):
            found.update(body)
    return found


def resource(parsed: dict[str, list[Any]], kind: str, name: str) -> dict[str, Any]:
    body = blocks_of(parsed, "resource", kind).get(name)
    assert body is not None, f"no resource {kind}.{name}"
    return dict(body)


def local(parsed: dict[str, list[Any]], name: str) -> Any:
    for block in parsed.get("locals", []):
        if name in block:
            return block[name]
    raise AssertionError(f"no local {name}")


def variable(parsed: dict[str, list[Any]], name: str) -> dict[str, Any]:
    for block in parsed.get("variable", []):
        if name in block:
            return dict(block[name])
    raise AssertionError(f"no variable {name}")


def walk(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, (*path, str(index)))


def module_iam_actions() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """(read-only actions, mutating actions by remediation) as the module declares them; the
    Lambda handler's tests check every AWS call the handler makes against these."""
    parsed = parse_dir(MODULE)
    by_remediation: dict[str, set[str]] = {}
    for statement in local(parsed, "mutating_statements"):
        by_remediation.setdefault(statement["remediation"], set()).update(statement["actions"])
    return (frozenset(local(parsed, "read_only_actions")),
            {name: frozenset(actions) for name, actions in by_remediation.items()})


@pytest.fixture(scope="module")
def module() -> dict[str, list[Any]]:
    return parse_dir(MODULE)


@pytest.fixture(scope="module")
def fan_out() -> dict[str, list[Any]]:
    return parse_dir(FAN_OUT)


# ------------------------------------------------------------------------------ HCL: every file


@pytest.mark.parametrize("directory", [MODULE, FAN_OUT, EXAMPLE], ids=lambda p: p.name)
def test_every_tf_file_parses_and_is_documented(directory: Path) -> None:
    files = sorted(directory.glob("*.tf"))
    assert files, f"no .tf files in {directory}"
    parsed = parse_dir(directory)
    for block in parsed.get("variable", []):
        for name, body in block.items():
            assert body.get("description"), f"variable {name} has no description"
            assert "type" in body, f"variable {name} has no type"
    for block in parsed.get("output", []):
        for name, body in block.items():
            assert body.get("description"), f"output {name} has no description"
    if directory is not EXAMPLE:
        assert {"main.tf", "variables.tf", "outputs.tf", "versions.tf"} <= {f.name for f in files}
        assert (directory / "README.md").is_file()


@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not installed (https://developer.hashicorp.com/terraform/install)")
def test_terraform_fmt_is_clean() -> None:
    result = subprocess.run(
        ["terraform", "fmt", "-check", "-recursive", "-list=true", str(TERRAFORM)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "CHECKPOINT_DISABLE": "1"})
    assert result.returncode == 0, f"not terraform fmt clean: {result.stdout}{result.stderr}"


# ------------------------------------------------------------------------------ HCL: IAM


@pytest.mark.parametrize("directory", [MODULE, FAN_OUT], ids=lambda p: p.name)
def test_no_wildcard_actions_in_any_allow_statement(directory: Path) -> None:
    parsed = parse_dir(directory)
    actions_seen = 0
    for path, value in walk(parsed):
        if not isinstance(value, dict) or "actions" not in value:
            continue
        actions = value["actions"]
        if isinstance(actions, str):  # a reference, e.g. ${local.read_only_actions}
            continue
        actions_seen += len(actions)
        if value.get("effect") == "Deny":
            continue  # a broad deny (the bucket's TLS-only policy) only narrows access
        wild = [a for a in actions if "*" in a]
        assert not wild, f"wildcard action {wild} at {'/'.join(path)}"
    assert actions_seen > 5


def test_read_only_actions_are_listed_explicitly_and_only_read(module: dict[str, Any]) -> None:
    read_only = local(module, "read_only_actions")
    assert len(read_only) == len(set(read_only)) >= 15
    assert not [a for a in read_only if not READ_ONLY.match(a)]
    assert not set(read_only) & MUTATING_ACTIONS
    for service in ("ec2", "autoscaling", "eks", "sagemaker"):
        assert any(a.startswith(f"{service}:") for a in read_only), service


def test_mutating_actions_exist_only_behind_var_enforce(module: dict[str, Any]) -> None:
    # Wherever a mutating action is written, it is in local.mutating_statements ...
    places = [path for path, value in walk(module)
              if isinstance(value, str) and any(a in value for a in MUTATING_ACTIONS)]
    assert places
    for path in places:
        assert "mutating_statements" in path, f"mutating action outside the guard: {path}"
    text = "\n".join(p.read_text("utf-8") for p in MODULE.glob("*.tf"))
    in_text = sum(len(re.findall(rf'"{re.escape(a)}"', text)) for a in MUTATING_ACTIONS)
    assert in_text == len(places)  # none hides where the parser does not look (heredocs)
    # ... which is read only through local.enabled_mutating_statements, empty unless enforce ...
    assert text.count("local.mutating_statements") == 1
    guard = local(module, "enabled_mutating_statements")
    assert re.fullmatch(r"\$\{var\.enforce \? \[for .* in local\.mutating_statements : .*"
                        r"if contains\(var\.remediation_actions, .*\)\] : \[\]\}", guard), guard
    # ... and turned into statements only by the dynamic block iterating over it.
    scan = blocks_of(module, "data", "aws_iam_policy_document")["scan"]
    assert [s["actions"] for s in scan["statement"]] == ["${local.read_only_actions}"]
    (dynamic,) = [d["statement"] for d in scan["dynamic"] if "statement" in d]
    assert dynamic["for_each"] == "${local.enabled_mutating_statements}"


def test_every_mutating_statement_excludes_production(module: dict[str, Any]) -> None:
    scan = blocks_of(module, "data", "aws_iam_policy_document")["scan"]
    (dynamic,) = [d["statement"] for d in scan["dynamic"] if "statement" in d]
    (content,) = dynamic["content"]
    conditions = {c["variable"]: c for c in content["condition"]}
    production = set(local(module, "production_values"))
    assert production == PRODUCTION_VALUES
    for key in ("aws:ResourceTag/env", "aws:ResourceTag/environment"):
        assert conditions[key]["test"] == "StringNotEqualsIgnoreCase"
        assert conditions[key]["values"] == "${local.production_values}"


def test_tag_writes_are_limited_to_gpuwarden_keys(module: dict[str, Any]) -> None:
    for statement in local(module, "mutating_statements"):
        writes_tags = any(a in ("ec2:CreateTags", "autoscaling:CreateOrUpdateTags",
                                "eks:TagResource", "sagemaker:AddTags")
                          for a in statement["actions"])
        assert bool(statement["tag_keys"]) == writes_tags, statement["sid"]
        assert all(k.startswith("gpuwarden:") for k in statement["tag_keys"])
        assert statement["resources"] and "*" not in statement["resources"], statement["sid"]


def test_remediation_actions_cover_what_the_builtin_pack_enforces(module: dict[str, Any]
                                                                  ) -> None:
    """The default remediation_actions grant what the built-in runtime-deny policies use."""
    from engine.loading.policies import load_policies
    from remediations.registry import ACTIONS

    needed = {name for policy in load_policies(["builtin"])
              if policy.enforcement("runtime") == "deny"
              for name in policy.spec.remediations if ACTIONS[name].mutating}
    default = set(variable(module, "remediation_actions")["default"])
    declared = {s["remediation"] for s in local(module, "mutating_statements")}
    assert needed and needed <= default <= declared


def test_assume_role_only_on_the_listed_roles(module: dict[str, Any]) -> None:
    function = blocks_of(module, "data", "aws_iam_policy_document")["function"]
    assumes = [d["statement"] for d in function["dynamic"]
               if "statement" in d and "sts:AssumeRole" in d["statement"]["content"][0]["actions"]]
    (assume, organization) = assumes  # the listed roles; one role name (organization_role_name)
    assert assume["for_each"] == "${length(var.role_arns) > 0 ? [var.role_arns] : []}"
    assert assume["content"][0]["resources"] == "${statement.value}"
    assert organization["for_each"] == (
        "${var.organization_role_name != null ? [var.organization_role_name] : []}")
    assert organization["content"][0]["resources"] == [
        "arn:${local.p}:iam::*:role/${statement.value}"]
    reports = [s for s in function["statement"] if s["actions"] == ["s3:PutObject"]]
    assert reports[0]["resources"] == ["${aws_s3_bucket.reports.arn}/${var.report_prefix}/*"]


# ------------------------------------------------------------------------------ HCL: storage, logs


def test_reports_bucket_is_encrypted_versioned_private_and_tls_only(module: dict[str, Any]
                                                                   ) -> None:
    sse = resource(module, "aws_s3_bucket_server_side_encryption_configuration", "reports")
    default = sse["rule"][0]["apply_server_side_encryption_by_default"][0]
    assert default["sse_algorithm"] == "${var.report_encryption}"
    encryption = variable(module, "report_encryption")
    assert encryption["default"] == "AES256"
    assert "contains([\"AES256\", \"aws:kms\"], var.report_encryption)" in \
        encryption["validation"][0]["condition"]

    versioning = resource(module, "aws_s3_bucket_versioning", "reports")
    assert versioning["versioning_configuration"][0]["status"] == "Enabled"

    block = resource(module, "aws_s3_bucket_public_access_block", "reports")
    for setting in ("block_public_acls", "block_public_policy", "ignore_public_acls",
                    "restrict_public_buckets"):
        assert block[setting] is True, setting

    policy = blocks_of(module, "data", "aws_iam_policy_document")["reports_bucket"]
    (deny,) = policy["statement"]
    assert deny["effect"] == "Deny"
    assert deny["condition"][0] == {"test": "Bool", "variable": "aws:SecureTransport",
                                    "values": ["false"]}
    bucket_policy = resource(module, "aws_s3_bucket_policy", "reports")
    assert bucket_policy["policy"] == "${data.aws_iam_policy_document.reports_bucket.json}"

    lifecycle = resource(module, "aws_s3_bucket_lifecycle_configuration", "reports")
    rule = lifecycle["rule"][0]
    assert rule["status"] == "Enabled"
    assert rule["expiration"][0]["days"] == "${var.report_retention_days}"
    assert "noncurrent_version_expiration" in rule


def test_log_group_has_retention_and_the_function_logs_there(module: dict[str, Any]) -> None:
    group = resource(module, "aws_cloudwatch_log_group", "function")
    assert group["retention_in_days"] == "${var.log_retention_days}"
    assert variable(module, "log_retention_days")["default"] == 30
    assert group["kms_key_id"] == "${var.log_kms_key_arn}"
    function = resource(module, "aws_lambda_function", "this")
    assert function["logging_config"][0]["log_group"] == \
        "${aws_cloudwatch_log_group.function.name}"


def test_function_runtime_and_handler(module: dict[str, Any]) -> None:
    function = resource(module, "aws_lambda_function", "this")
    assert function["runtime"] == "python3.12"
    assert function["architectures"] == ["arm64"]
    assert function["handler"] == "engine.lambda_handler.handler"
    assert function["memory_size"] == "${var.memory_size}"
    assert function["timeout"] == "${var.timeout}"
    module_name, _, attribute = function["handler"].rpartition(".")
    assert callable(getattr(sys.modules[lambda_handler.__name__], attribute))
    assert module_name == lambda_handler.__name__


def test_module_sets_only_environment_variables_the_handler_reads(module: dict[str, Any]
                                                                 ) -> None:
    text = (MODULE / "main.tf").read_text("utf-8")
    set_by_module = set(re.findall(r"\b(GPUWARDEN_[A-Z_]+)\s*=", text))
    read_by_handler = {value for name, value in vars(lambda_config).items()
                       if name.startswith("ENV_") and isinstance(value, str)}
    assert set_by_module <= read_by_handler, set_by_module - read_by_handler
    assert {"GPUWARDEN_MODE", "GPUWARDEN_ALLOW_ENFORCE", "GPUWARDEN_REPORT_BUCKET",
            "GPUWARDEN_REGIONS", "GPUWARDEN_ROLE_ARNS", "GPUWARDEN_MAX_ACTIONS",
            "GPUWARDEN_POLICIES", "GPUWARDEN_REPORT_PREFIX"} <= set_by_module


def test_schedule_has_a_time_zone_and_an_input_the_handler_accepts(module: dict[str, Any]
                                                                   ) -> None:
    schedule = resource(module, "aws_scheduler_schedule", "this")
    assert schedule["schedule_expression_timezone"] == "${var.schedule_expression_timezone}"
    assert variable(module, "schedule_expression_timezone")["default"] == "UTC"
    assert schedule["flexible_time_window"][0]["mode"] == "OFF"
    assert schedule["target"][0]["input"] == "${local.schedule_input}"
    keys = set(re.findall(r"^\s+(\w+)\s+=\s+\"<aws\.scheduler\.[a-z-]+>\"",
                          (MODULE / "main.tf").read_text("utf-8"), re.M))
    assert keys == set(lambda_handler.SCHEDULER_FIELDS)


# ------------------------------------------------------------------------------ HCL: fan-out


def test_fan_out_is_a_bounded_distributed_map_over_account_region_pairs(fan_out: dict[str, Any]
                                                                         ) -> None:
    text = (FAN_OUT / "main.tf").read_text("utf-8")
    assert 'ProcessorConfig = { Mode = "DISTRIBUTED", ExecutionType = "STANDARD" }' in text
    assert "MaxConcurrency             = var.max_concurrency" in text
    items = local(fan_out, "items")
    assert "for region in target.regions" in items and "regions  = [region]" not in items
    assert re.search(r"regions\s*=\s*\[region\]", text)
    machine = resource(fan_out, "aws_sfn_state_machine", "this")
    assert machine["logging_configuration"][0]["log_destination"].startswith(
        "${aws_cloudwatch_log_group.state_machine.arn}")
    group = resource(fan_out, "aws_cloudwatch_log_group", "state_machine")
    assert group["retention_in_days"] == "${var.log_retention_days}"
    schedule = resource(fan_out, "aws_scheduler_schedule", "this")
    assert schedule["schedule_expression_timezone"] == "${var.schedule_expression_timezone}"


def test_example_uses_both_modules_from_this_repository() -> None:
    parsed = parse_dir(EXAMPLE)
    sources = {name: body["source"] for block in parsed["module"] for name, body in block.items()}
    assert set(sources) == {"gpuwarden", "fan_out"}
    for source in sources.values():
        assert (EXAMPLE / source).resolve().is_dir(), source
    gpuwarden = next(b["gpuwarden"] for b in parsed["module"] if "gpuwarden" in b)
    assert gpuwarden["enforce"] == "${var.enforce}"
    assert variable(parsed, "enforce")["default"] is False


# ------------------------------------------------------------------------------ checkov

# Checks these modules fail by design, with the reason (docs/runtime.md repeats them).
CHECKOV_ACCEPTED = {
    "CKV_AWS_338": "log retention defaults to 30 days (log_retention_days); reports live in S3",
    "CKV_AWS_117": "the function calls only public AWS APIs; a VPC needs NAT or endpoints and "
                   "ENI permissions",
    "CKV_AWS_50": "no X-Ray: the JSON logs carry each phase's timing",
    "CKV2_AWS_62": "nothing consumes bucket notifications",
    "CKV_AWS_18": "no access-log bucket: CloudTrail data events are the audit of reads",
    "CKV_AWS_145": "AES256 by default; report_encryption = aws:kms (and kms_key_arn) for KMS",
    "CKV_AWS_144": "no replication: reports are reproducible from a rescan",
    "CKV_AWS_285": "state input/output hold account ids and roles: log_execution_data opts in",
    "CKV_AWS_284": "X-Ray opt-in (tracing_enabled)",
}


@pytest.mark.parametrize("directory", [MODULE, FAN_OUT], ids=lambda p: p.name)
def test_checkov_fails_only_accepted_checks(directory: Path) -> None:
    checkov = os.environ.get("GPUWARDEN_CHECKOV") or shutil.which("checkov")
    if not checkov:
        pytest.skip("checkov is not installed (pip install checkov; or set GPUWARDEN_CHECKOV)")
    result = subprocess.run(
        [checkov, "-d", str(directory), "--framework", "terraform", "--quiet", "--compact",
         "-o", "json"], capture_output=True, text=True, timeout=300, check=False)
    data = json.loads(result.stdout)
    report = data[0] if isinstance(data, list) else data
    failed = {c["check_id"]: c["resource"] for c in report["results"]["failed_checks"]}
    assert report["summary"]["passed"] > 20
    assert set(failed) <= set(CHECKOV_ACCEPTED), {k: v for k, v in failed.items()
                                                   if k not in CHECKOV_ACCEPTED}


# ------------------------------------------------------------------------------ terraform plan

TF_ROOT = """
provider "aws" {{
  region                      = "us-east-1"
  access_key                  = "testing"
  secret_key                  = "testing"
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_requesting_account_id  = true
  s3_use_path_style           = true
  max_retries                 = 2
  endpoints {{
{endpoints}
  }}
}}

module "dry" {{
  source       = "{module}"
  name         = "gw-dry"
  package_path = "${{path.root}}/package.zip"
  report_bucket_name = "gw-dry-reports"
  regions      = ["us-east-1"]
  schedule_expression_timezone = "Europe/Berlin"
}}

module "enforce" {{
  source              = "{module}"
  name                = "gw-enforce"
  package_path        = "${{path.root}}/package.zip"
  report_bucket_name  = "gw-enforce-reports"
  enforce             = true
  remediation_actions = ["stop", "snapshot-before-stop", "mark-violation"]
  managed_tag_key     = "gpuwarden-managed"
  role_arns           = ["arn:aws:iam::111122223333:role/gpuwarden-scan"]
  report_encryption   = "aws:kms"
  kms_key_arn         = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234"
  max_actions         = 4
}}

module "fan_out" {{
  source       = "{fan_out}"
  function_arn = "arn:aws:lambda:us-east-1:123456789012:function:gw-enforce"
  targets = [
    {{ account_id = "111122223333", role_arn = "arn:aws:iam::111122223333:role/gpuwarden-scan",
      regions = ["us-east-1", "eu-west-1"] }},
    {{ account_id = "444455556666", role_arn = "arn:aws:iam::444455556666:role/gpuwarden-scan",
      regions = ["us-west-2"] }},
  ]
  event_overrides = {{ max_actions = 2 }}
  max_concurrency = 3
}}

output "dry_scan_policy" {{ value = module.dry.member_role_policy_json }}
output "enforce_scan_policy" {{ value = module.enforce.member_role_policy_json }}
output "fan_out_items" {{ value = module.fan_out.items }}
"""
SERVICES = ("sts", "s3", "iam", "lambda", "scheduler", "logs", "cloudwatch")


class _StepFunctionsValidator(BaseHTTPRequestHandler):
    """Answers the one Step Functions call `terraform plan` makes
    (ValidateStateMachineDefinition; moto lacks it): the definition must be JSON with StartAt
    naming one of its States. Every definition received is kept for the tests."""

    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        target = self.headers.get("X-Amz-Target", "")
        if not target.endswith(".ValidateStateMachineDefinition"):
            self._reply(400, {"__type": "UnknownOperationException", "message": target})
            return
        diagnostics = []
        try:
            definition = json.loads(body.get("definition", ""))
            self.received.append(definition)
            if definition.get("StartAt") not in (definition.get("States") or {}):
                diagnostics.append({"severity": "ERROR", "code": "MISSING_START",
                                    "message": "StartAt does not name a state"})
        except ValueError as exc:
            diagnostics.append({"severity": "ERROR", "code": "INVALID_JSON", "message": str(exc)})
        self._reply(200, {"result": "FAIL" if diagnostics else "OK",
                          "diagnostics": diagnostics, "truncated": False})

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _terraform_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_"))}
    env.update(CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1", TF_INPUT="0",
               TF_CLI_CONFIG_FILE=str(tmp / "terraformrc"), TF_DATA_DIR=str(tmp / ".terraform"))
    return env


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`terraform show -json` of a plan of both modules, AWS answered by moto on loopback."""
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not installed (https://developer.hashicorp.com/terraform/install)")
    if not (PLUGIN_DIR / "registry.terraform.io" / "hashicorp" / "aws").is_dir():
        pytest.skip(f"no local AWS provider mirror at {PLUGIN_DIR}")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    validator = ThreadingHTTPServer(("127.0.0.1", 0), _StepFunctionsValidator)
    threading.Thread(target=validator.serve_forever, daemon=True).start()
    try:
        host, port = server.get_host_and_port()
        tmp = tmp_path_factory.mktemp("tfplan")
        (tmp / "terraformrc").write_text("", "utf-8")
        with zipfile.ZipFile(tmp / "package.zip", "w") as package:
            package.writestr("engine/lambda_handler.py", "")
        endpoints = "\n".join([*(f'    {s} = "http://{host}:{port}"' for s in SERVICES),
                               f'    sfn = "http://127.0.0.1:{validator.server_address[1]}"'])
        (tmp / "main.tf").write_text(TF_ROOT.format(
            endpoints=endpoints, module=MODULE.as_posix(), fan_out=FAN_OUT.as_posix()), "utf-8")
        env = _terraform_env(tmp)
        for command in (
            ["terraform", "init", "-backend=false", f"-plugin-dir={PLUGIN_DIR}", "-input=false"],
            ["terraform", "plan", "-refresh=false", "-input=false", "-out=plan.bin"],
        ):
            result = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True,
                                    timeout=300, check=False)
            assert result.returncode == 0, f"{command[1]}: {result.stdout[-3000:]}" \
                                           f"{result.stderr[-3000:]}"
        shown = subprocess.run(["terraform", "show", "-json", "plan.bin"], cwd=tmp, env=env,
                               capture_output=True, text=True, timeout=120, check=True)
        data: dict[str, Any] = json.loads(shown.stdout)
        (tmp / "plan.json").write_text(shown.stdout, "utf-8")
        data["__path__"] = str(tmp / "plan.json")
        data["__validated__"] = list(_StepFunctionsValidator.received)
        return data
    finally:
        validator.shutdown()
        server.stop()


def planned(plan: dict[str, Any], address: str) -> dict[str, Any]:
    for change in plan["resource_changes"]:
        if change["address"] == address:
            return dict(change["change"]["after"])
    raise AssertionError(f"{address} is not in the plan")


def statements(plan: dict[str, Any], output: str) -> list[dict[str, Any]]:
    document = json.loads(plan["planned_values"]["outputs"][output]["value"])
    found: list[dict[str, Any]] = document["Statement"]
    return found


def as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def test_plan_dry_run_role_is_read_only(plan: dict[str, Any]) -> None:
    read_only, _ = module_iam_actions()
    (statement,) = statements(plan, "dry_scan_policy")
    assert statement["Effect"] == "Allow"
    assert set(as_list(statement["Action"])) == read_only
    assert statement["Resource"] == "*"


def test_plan_enforce_role_mutates_only_non_production_with_the_managed_tag(plan: dict[str, Any]
                                                                           ) -> None:
    found = statements(plan, "enforce_scan_policy")
    mutating = [s for s in found if s.get("Sid") != "ReadInventory"]
    actions = {a for s in mutating for a in as_list(s["Action"])}
    assert actions == MUTATING_ACTIONS
    for statement in mutating:
        assert "*" not in as_list(statement["Resource"]), statement["Sid"]
        assert not [a for a in as_list(statement["Action"]) if "*" in a]
        negated = statement["Condition"]["StringNotEqualsIgnoreCase"]
        for key in ("aws:ResourceTag/env", "aws:ResourceTag/environment"):
            assert set(as_list(negated[key])) == PRODUCTION_VALUES, statement["Sid"]
        if statement["Sid"] != "TagNewSnapshots":
            managed = statement["Condition"]["StringEqualsIgnoreCase"]
            assert managed == {"aws:ResourceTag/gpuwarden-managed": "true"}
        if {"ec2:CreateTags", "eks:TagResource", "sagemaker:AddTags"} & set(
                as_list(statement["Action"])):
            keys = as_list(statement["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"])
            assert keys and all(k.startswith("gpuwarden:") for k in keys)


def test_plan_environment_and_schedule_input_are_what_the_handler_accepts(plan: dict[str, Any]
                                                                         ) -> None:
    for name, mode in (("dry", "dry-run"), ("enforce", "enforce")):
        function = planned(plan, f"module.{name}.aws_lambda_function.this")
        assert function["runtime"] == "python3.12" and function["architectures"] == ["arm64"]
        environment = dict(function["environment"][0]["variables"])
        config = lambda_handler.parse_run_config({}, environment)
        assert config.mode == mode
        assert config.bucket == f"gw-{name}-reports" and config.prefix == "gpuwarden"
        if name == "enforce":
            assert config.sse == "aws:kms" and config.kms_key_id is not None
            assert config.max_actions == 4 and len(config.role_arns) == 1
        else:
            assert config.regions == ("us-east-1",)
            with pytest.raises(InputError, match="not allowed"):
                lambda_handler.parse_run_config({"mode": "enforce"}, environment)

    schedule = planned(plan, "module.dry.aws_scheduler_schedule.this[0]")
    assert schedule["schedule_expression_timezone"] == "Europe/Berlin"
    payload = json.loads(schedule["target"][0]["input"])
    # What EventBridge Scheduler sends once it has filled in its context attributes.
    filled = {k: re.sub(r"^<aws\.scheduler\.[a-z-]+>$", "f00d1234", v) for k, v in payload.items()}
    config = lambda_handler.parse_run_config(filled, {})
    assert config.trigger_id == "f00d1234"


def test_plan_fan_out_invokes_once_per_account_region(plan: dict[str, Any]) -> None:
    items = plan["planned_values"]["outputs"]["fan_out_items"]["value"]
    assert sorted((i["account"], tuple(i["regions"])) for i in items) == [
        ("111122223333", ("eu-west-1",)), ("111122223333", ("us-east-1",)),
        ("444455556666", ("us-west-2",))]
    for item in items:
        config = lambda_handler.parse_run_config(item, {})
        assert config.max_actions == 2 and len(config.role_arns) == 1
        assert config.role_arns[0].split(":")[4] == item["account"]
    machine = planned(plan, "module.fan_out.aws_sfn_state_machine.this")
    definition = json.loads(machine["definition"])
    fan = definition["States"]["ScanEachTarget"]
    assert fan["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert fan["MaxConcurrency"] == 3
    assert definition["States"]["Targets"]["Result"] == items
    assert plan["__validated__"] == [definition]  # what the provider had validated


def test_plan_passes_gpuwarden_check_plan_rules(plan: dict[str, Any], tmp_path: Path) -> None:
    """gpuwarden's own PR check over its own deployment: the report buckets are encrypted;
    with customer keys required, only the KMS-encrypted one passes."""
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text("apiVersion: gpuwarden.io/v1\noverrides:\n  encryption-at-rest:\n"
                         "    parameters:\n      require_customer_key: true\n", "utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}

    def check(*policies: str) -> dict[str, Any]:
        command = [sys.executable, "-m", "engine", "check-plan", plan["__path__"], "--format",
                   "json", *[arg for p in policies for arg in ("--policies", p)]]
        result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                                timeout=120, check=False)
        assert result.returncode in (0, 1), result.stderr
        report: dict[str, Any] = json.loads(result.stdout)
        return report

    default = check()
    assert default["summary"]["resources"] == 2  # the two report buckets
    assert [f for f in default["findings"] if f["result"] == "fail"] == []

    strict = check("builtin", str(overrides))
    failing = {f["resource"]["id"] for f in strict["findings"]
               if f["policy"] == "encryption-at-rest" and f["result"] == "fail"}
    assert failing == {"module.dry.aws_s3_bucket.reports"}


# Permission-only CloudWatch Logs actions: IAM accepts no resource but "*" for them.
LOG_DELIVERY_ACTIONS = frozenset({"logs:CreateLogDelivery", "logs:DeleteLogDelivery",
                                  "logs:GetLogDelivery", "logs:ListLogDeliveries",
                                  "logs:UpdateLogDelivery"})


@pytest.mark.parametrize("directory", [MODULE, FAN_OUT], ids=lambda p: p.name)
def test_no_logs_action_is_granted_on_every_resource(directory: Path) -> None:
    """logs:* on "*" only for the permission-only log-delivery actions, and then only under a
    condition; PutResourcePolicy and the rest name their log group."""
    logs_statements = 0
    for path, value in walk(parse_dir(directory)):
        if not isinstance(value, dict) or not isinstance(value.get("actions"), list):
            continue
        logs = [a for a in value["actions"] if a.startswith("logs:")]
        if not logs or value.get("effect") == "Deny":
            continue
        logs_statements += 1
        resources = value.get("resources") or []
        if "*" in resources:
            where = "/".join(path)
            assert set(logs) <= LOG_DELIVERY_ACTIONS, f"{sorted(logs)} on '*' at {where}"
            assert value.get("condition"), f"log delivery on '*' without a condition at {where}"
    assert logs_statements >= 1
