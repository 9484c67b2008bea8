"""Which accounts and regions to scan: the ambient credentials' account, or each `--role-arn`
assumed; the regions asked for that exist and are enabled there (`all`: every enabled one)."""

from __future__ import annotations

import re
from typing import Any

from engine.core.errors import InputError
from engine.sources.aws.clients import Account, AwsClients, make_client
from engine.sources.aws.failures import Tally, boto_errors, classify, one_line
from engine.sources.aws.permissions import IamDeclarations
from engine.sources.registry import ScanOptions

SESSION_NAME = "gpuwarden"
IAM = IamDeclarations()
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/\S+$")


def base_session(profile: str | None) -> Any:
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.Session(profile_name=profile)
    except BotoCoreError as exc:  # ProfileNotFound and unreadable config files
        raise InputError(f"aws: {one_line(exc)}") from None


@IAM.declare(ungated=["sts:GetCallerIdentity"])
def caller_account(session: Any, region: str, tally: Tally, warnings: list[str]
                    ) -> Account | None:
    account = Account(session)
    try:
        identity = make_client(session, "sts", region).get_caller_identity()
    except boto_errors() as exc:
        failure = classify(exc)
        tally.failed(failure)
        if failure.kind == "credentials":
            warnings.append(f"aws: default credentials: {failure.text}")
            return None
        warnings.append(f"aws: cannot tell the account id (sts GetCallerIdentity: "
                        f"{failure.text}); scanning anyway")
        return account
    account.account_id = str(identity.get("Account") or "") or None
    return account


@IAM.declare(assumes=["sts:AssumeRole"])
def assumed_account(base: Any, role_arn: str, region: str, tally: Tally,
                     warnings: list[str]) -> Account | None:
    import boto3

    try:
        response = make_client(base, "sts", region).assume_role(
            RoleArn=role_arn, RoleSessionName=SESSION_NAME)
    except boto_errors() as exc:
        failure = classify(exc)
        tally.failed(failure)
        warnings.append(f"aws: cannot assume {role_arn}: {failure.text}; account skipped")
        return None
    credentials = response["Credentials"]
    session = boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=base.region_name,
    )
    return Account(session, account_id=role_arn.split(":")[4], role_arn=role_arn)


def _home_region(session: Any, requested: tuple[str, ...]) -> str:
    if session.region_name:
        return str(session.region_name)
    known = set(session.get_available_regions("ec2"))
    return next((region for region in requested if region in known), "us-east-1")


@IAM.declare(reads=["ec2:DescribeRegions"])
def account_regions(clients: AwsClients, account: Account, requested: tuple[str, ...],
                    tally: Tally, warnings: list[str]) -> list[str]:
    """The regions to read in `account`: those asked for that exist and are enabled there,
    every enabled one for `all`, else the session's region."""
    home = _home_region(account.session, requested)
    if not requested:
        return [home]
    try:
        listed = clients.client("ec2", home, account).describe_regions(AllRegions=True)
    except boto_errors() as exc:
        failure = classify(exc)
        tally.failed(failure)
        if failure.kind in ("credentials", "connection"):
            warnings.append(f"aws: account {account.label}: {failure.text}; account skipped")
            return []
        warnings.append(f"aws: account {account.label}: cannot list regions ({failure.text})")
        return [region for region in requested if region != "all"] or [home]
    status = {r["RegionName"]: r.get("OptInStatus", "opt-in-not-required")
              for r in listed.get("Regions") or []}
    return _chosen_regions(account, requested, status, warnings)


def _chosen_regions(account: Account, requested: tuple[str, ...], status: dict[str, str],
                    warnings: list[str]) -> list[str]:
    """The requested regions (`all` expanded) that exist and are enabled, by opt-in status."""
    enabled = [name for name, state in status.items() if state != "not-opted-in"]
    chosen: list[str] = []
    for region in requested:
        if region == "all":
            chosen.extend(sorted(enabled))
        elif region not in status:
            warnings.append(f"aws: account {account.label}: region {region!r} does not exist; "
                            "skipped")
        elif status[region] == "not-opted-in":
            warnings.append(f"aws: account {account.label}: region {region} is not enabled; "
                            "skipped")
        else:
            chosen.append(region)
    return list(dict.fromkeys(chosen))


def base_and_home(options: ScanOptions) -> tuple[Any, str]:
    """The base session (ambient credentials or `--profile`) and the region its global calls
    (STS, Organizations) go to."""
    base = base_session(options.profile)
    if not options.regions and not base.region_name:
        raise InputError("aws: no region: give --region (or 'all'), or set AWS_REGION or a "
                         "profile region")
    return base, _home_region(base, options.regions)


def connect(options: ScanOptions, tally: Tally, warnings: list[str]) -> AwsClients:
    """Sessions for every account to scan: each `--role-arn` assumed, else the ambient
    credentials (environment, profile, instance role)."""
    for arn in options.role_arns:
        if not _ROLE_ARN.match(arn):
            raise InputError(f"aws: --role-arn {arn!r} is not an IAM role ARN "
                             "(arn:aws:iam::123456789012:role/NAME)")
    base, home = base_and_home(options)
    if options.role_arns:
        found = [assumed_account(base, arn, home, tally, warnings) for arn in options.role_arns]
    else:
        found = [caller_account(base, home, tally, warnings)]
    return AwsClients(account for account in found if account is not None)
