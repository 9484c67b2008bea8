"""`gpuwarden scan --source aws --organization`: moto in server mode holds an organization with
three member accounts, one of them suspended; the scan lists them through Organizations, assumes
`--role-name` in each active one, and every finding names its account."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.errors import InputError
from engine.sources.aws import organization
from engine.sources.aws.scan import collect
from engine.sources.registry import Collected, ScanOptions
from tests.conftest_aws import (
    ACCOUNT,
    COST_TAGS,
    EAST,
    AwsLab,
    aws_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
    run_instance,
)
from tests.test_aws_source import OFF_HOURS_NOW, deny
from tests.test_cli import run_cli

ROLE_NAME = "gpuwarden-audit"


@dataclass
class Org:
    active: list[str]  # member accounts, created ACTIVE
    suspended: str
    instances: dict[str, str]  # account -> a GPU instance running there


def create_account(organizations: Any, name: str) -> str:
    status = organizations.create_account(AccountName=name, Email=f"{name}@example.com")
    return str(status["CreateAccountStatus"]["AccountId"])


@pytest.fixture(name="org")
def org_fixture(aws: AwsLab) -> Org:
    organizations = aws.client("organizations")
    organizations.create_organization(FeatureSet="ALL")
    research, platform, closed = (create_account(organizations, name)
                                  for name in ("research", "platform", "closed"))
    organizations.close_account(AccountId=closed)
    instances = {account: run_instance(aws.client("ec2", EAST, aws.session_for(account)),
                                       "p3.2xlarge", {"env": "dev", **COST_TAGS})
                 for account in (research, platform, closed)}
    return Org(active=[research, platform], suspended=closed, instances=instances)


def collect_org(**options: Any) -> Collected:
    return collect(None, ScanOptions(regions=(EAST,), organization=True, role_name=ROLE_NAME,
                                     **options), builtin_catalog())


def deny_assume_into(account: str) -> Any:
    """A client hook refusing AssumeRole into one account, as a missing trust policy would."""
    from botocore.exceptions import ClientError

    def hook(client: Any) -> None:
        def before_call(model: Any, params: dict[str, Any], **_: Any) -> None:
            if model.name == "AssumeRole" and f":{account}:" in params["body"]["RoleArn"]:
                raise ClientError({"Error": {"Code": "AccessDenied",
                                             "Message": "not trusted"}}, "AssumeRole")

        client.meta.events.register("before-call", before_call)

    return hook


def test_every_active_account_is_scanned_through_the_role(aws: AwsLab, org: Org) -> None:
    calls = aws.record_calls()
    collected = collect_org()
    assumed = sorted(c[3]["RoleArn"] for c in calls if c[2] == "AssumeRole")
    assert assumed == sorted(f"arn:aws:iam::{a}:role/{ROLE_NAME}" for a in org.active)
    assert [c[2] for c in calls if c[1] == "organizations"] == ["ListAccounts"]
    scanned = {a.account_id for a in collected.clients["aws"].accounts}
    assert scanned == {ACCOUNT, *org.active}  # the caller's own account with its credentials
    found = {r.id: r.account for r in collected.resources if r.kind == "aws_instance"}
    for account in org.active:
        assert found[org.instances[account]] == account
    assert org.instances[org.suspended] not in found
    assert not collected.warnings


def test_findings_carry_their_account_and_the_outputs_group_by_it(
    aws: AwsLab, org: Org, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = ["scan", "--source", "aws", "--region", EAST, "--organization", "--role-name",
            ROLE_NAME, "--now", OFF_HOURS_NOW]
    code, out, err = run_cli([*args, "-f", "json"], capsys, monkeypatch)
    assert code == 1, err
    report = json.loads(out)
    off_hours = {f["resource"]["id"]: f["resource"]["account"] for f in report["findings"]
                 if f["policy"] == "gpu-off-hours-shutdown"}
    assert {off_hours[org.instances[a]] for a in org.active} == set(org.active)
    by_account = report["summary"]["by_account"]
    assert set(org.active) <= set(by_account) and org.suspended not in by_account
    assert sum(by_account.values()) == report["summary"]["findings"]

    code, table, _ = run_cli(args, capsys, monkeypatch)
    assert code == 1
    assert "By account" in table
    assert all(account in table.split("By account", 1)[1] for account in org.active)
    code, markdown, _ = run_cli([*args, "-f", "markdown"], capsys, monkeypatch)
    assert "### By account" in markdown and f"`{org.active[0]}`" in markdown


def test_a_role_that_cannot_be_assumed_skips_only_its_account(aws: AwsLab, org: Org) -> None:
    refused, other = org.active
    aws.hooks.append(deny_assume_into(refused))
    collected = collect_org()
    assert {a.account_id for a in collected.clients["aws"].accounts} == {ACCOUNT, other}
    (warning,) = collected.warnings
    assert warning.startswith(f"aws: account {refused} (research): cannot assume ")
    assert f"arn:aws:iam::{refused}:role/{ROLE_NAME}" in warning
    assert "access denied" in warning and "account skipped" in warning
    assert org.instances[other] in {r.id for r in collected.resources}


def test_the_number_of_accounts_is_bounded(aws: AwsLab, org: Org) -> None:
    collected = collect_org(max_accounts=2)
    assert len(collected.clients["aws"].accounts) == 2
    assert any("1 more active accounts than --max-accounts 2" in w for w in collected.warnings)


def test_accounts_that_cannot_be_listed_are_one_clear_error(
    aws: AwsLab, org: Org, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    aws.hooks.append(deny("AccessDeniedException", service="organizations"))
    code, out, err = run_cli(["scan", "--source", "aws", "--region", EAST, "--organization"],
                             capsys, monkeypatch)
    assert code == 2 and not out
    assert err.count("\n") == 1, err
    assert "cannot list the organization's accounts: access denied to ListAccounts" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("options", "message"), [
    ({"role_arns": (f"arn:aws:iam::{ACCOUNT}:role/x",)}, "not both"),
    ({"role_name": "no spaces allowed"}, "not an IAM role name"),
])
def test_bad_organization_options_are_input_errors(aws: AwsLab, options: dict[str, Any],
                                                   message: str) -> None:
    settings = {"role_name": ROLE_NAME, **options}
    with pytest.raises(InputError, match=message):
        collect(None, ScanOptions(regions=(EAST,), organization=True, **settings),
                builtin_catalog())


def test_role_names_and_arns() -> None:
    assert organization.checked_role_name(None) == "OrganizationAccountAccessRole"
    assert organization.checked_role_name("audit/gpuwarden-read") == "audit/gpuwarden-read"
    assert (organization.member_role_arn("aws-us-gov", "111122223333", "r")
            == "arn:aws-us-gov:iam::111122223333:role/r")
    for bad in ("a" * 65, "/leading", "trailing/", "semi;colon", "two  spaces"):
        with pytest.raises(InputError):
            organization.checked_role_name(bad)


def test_a_role_name_without_organization_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = run_cli(["scan", "--source", "aws", "--role-name", ROLE_NAME],
                             capsys, monkeypatch)
    assert code == 2 and not out and err.count("\n") == 1 and "give --organization" in err


def test_account_names_are_shown_on_one_bounded_line() -> None:
    assert organization._shown_name("ml\nresearch\x1b[31m") == "ml research[31m"
    assert organization._shown_name("x" * 500) == "x" * 64
    assert organization._shown_name(None) == ""
