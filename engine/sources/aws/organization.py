"""`--organization`: every active member account of the AWS Organization, each scanned through
a role of the same name (`--role-name`) assumed in it.

The accounts come from Organizations `ListAccounts` (paginated; the caller must be the
management account or a delegated administrator). Accounts that are not ACTIVE (suspended,
pending closure, closed) are left out; the caller's own account is scanned with the base
credentials, since the member role rarely exists in the management account. A role that cannot
be assumed is one warning naming the account, and the other accounts are scanned. The number of
accounts (`--max-accounts`) and the concurrency of the assumptions (`max_workers`) are bounded.

`fan_out_targets` gives the same accounts to the Step Functions fan-out (the function's
`{"discover": "organization"}` event): one invocation event per (account, region).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from engine.core.errors import InputError
from engine.sources.aws.clients import Account, AwsClients, make_client
from engine.sources.aws.discovery import assumed_account, base_and_home, caller_account
from engine.sources.aws.failures import Tally, boto_errors, classify
from engine.sources.aws.permissions import IamDeclarations
from engine.sources.collected import ScanOptions

DEFAULT_ROLE_NAME = "OrganizationAccountAccessRole"
# Step Functions passes at most 256 KB between states: about this many fan-out events.
MAX_FAN_OUT_TARGETS = 2000
IAM = IamDeclarations()
# An IAM role name, optionally behind a path (`gpuwarden/scan`).
_ROLE_NAME = re.compile(r"^(?:[\w+=,.@-]{1,64}/){0,8}[\w+=,.@-]{1,64}$")
_ACCOUNT_ID = re.compile(r"^\d{12}$")
_PAGE_SIZE = 20  # ListAccounts' largest page


@dataclass(frozen=True, slots=True)
class MemberAccount:
    """One account of the organization as ListAccounts gives it."""

    account_id: str
    name: str


def checked_role_name(role_name: str | None) -> str:
    """`--role-name` (default OrganizationAccountAccessRole), checked to be an IAM role name."""
    name = role_name or DEFAULT_ROLE_NAME
    if not _ROLE_NAME.match(name):
        raise InputError(f"aws: --role-name {name[:80]!r} is not an IAM role name "
                         "(letters, digits and +=,.@_- , optionally behind a path/)")
    return name


def member_role_arn(partition: str, account_id: str, role_name: str) -> str:
    return f"arn:{partition}:iam::{account_id}:role/{role_name}"


def _is_active(entry: dict[str, Any]) -> bool:
    """`State` replaces the deprecated `Status`; both read ACTIVE for a usable account."""
    return str(entry.get("State") or entry.get("Status") or "") == "ACTIVE"


def _shown_name(name: object) -> str:
    """An account's name for one warning line: printable, one line, bounded."""
    text = " ".join(str(name or "").split())
    return "".join(c for c in text if c.isprintable())[:64]


def _listed_accounts(client: Any) -> Iterator[dict[str, Any]]:
    paginator = client.get_paginator("list_accounts")
    for page in paginator.paginate(PaginationConfig={"PageSize": _PAGE_SIZE}):
        yield from page.get("Accounts") or []


@IAM.declare(reads=["organizations:ListAccounts"])
def active_member_accounts(session: Any, region: str, limit: int, tally: Tally,
                           warnings: list[str]) -> list[MemberAccount]:
    """The organization's ACTIVE accounts, at most `limit` of them (a warning says how many
    more there were). Listing them is the one call that must succeed: an InputError if not."""
    found: list[MemberAccount] = []
    left_out = 0
    try:
        for entry in _listed_accounts(make_client(session, "organizations", region)):
            account_id = str(entry.get("Id") or "")
            if not _is_active(entry) or not _ACCOUNT_ID.match(account_id):
                continue
            if len(found) >= limit:
                left_out += 1
                continue
            found.append(MemberAccount(account_id, _shown_name(entry.get("Name"))))
    except boto_errors() as exc:
        failure = classify(exc)
        tally.failed(failure)
        raise InputError(f"aws: cannot list the organization's accounts: {failure.text} "
                         "(--organization needs organizations:ListAccounts in the management "
                         "account or a delegated administrator account)") from None
    tally.ok()
    if not found:
        raise InputError("aws: the organization lists no active account")
    if left_out:
        warnings.append(f"aws: the organization has {left_out} more active accounts than "
                        f"--max-accounts {limit}; they were not scanned")
    return found


def connect_organization(options: ScanOptions, tally: Tally, warnings: list[str]
                         ) -> AwsClients:
    """Sessions for every active account of the organization: the caller's own with the base
    credentials, each other one through `--role-name`, assumed concurrently."""
    if options.role_arns:
        raise InputError("aws: give --organization (with --role-name) or --role-arn, not both")
    role_name = checked_role_name(options.role_name)
    base, home = base_and_home(options)
    caller = caller_account(base, home, tally, warnings)
    if caller is None:
        return AwsClients()
    members = active_member_accounts(base, home, max(1, options.max_accounts), tally, warnings)
    partition = base.get_partition_for_region(home) or "aws"
    own_warnings = [list[str]() for _ in members]

    def account_of(position: int) -> Account | None:
        member = members[position]
        if member.account_id == caller.account_id:
            return caller
        found = assumed_account(base, member_role_arn(partition, member.account_id, role_name),
                                home, tally, own_warnings[position])
        named = f"aws: account {member.account_id} ({member.name or 'no name'}): "
        own_warnings[position] = [named + w.removeprefix("aws: ") for w in own_warnings[position]]
        return found

    workers = max(1, min(options.max_workers, len(members)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuwarden-org") as pool:
        found = list(pool.map(account_of, range(len(members))))
    for member_warnings in own_warnings:  # in the organization's order, whatever finished first
        warnings.extend(member_warnings)
    return AwsClients(account for account in found if account is not None)


def fan_out_targets(options: ScanOptions, tally: Tally, warnings: list[str]
                    ) -> list[dict[str, Any]]:
    """The fan-out's events, one per active account and region (`options.regions`, else the
    session's): `role_arn` for the members, `"organization": false` for the caller's own
    account (scanned with the function's credentials). At most MAX_FAN_OUT_TARGETS."""
    role_name = checked_role_name(options.role_name)
    base, home = base_and_home(options)
    caller = caller_account(base, home, tally, warnings)
    if caller is None or caller.account_id is None:
        raise InputError("aws: cannot tell the function's own account (sts GetCallerIdentity)")
    members = active_member_accounts(base, home, max(1, options.max_accounts), tally, warnings)
    partition = base.get_partition_for_region(home) or "aws"
    targets: list[dict[str, Any]] = []
    for member in members:
        event: dict[str, Any] = {"account": member.account_id}
        if member.account_id == caller.account_id:
            event["organization"] = False
        else:
            event["role_arn"] = member_role_arn(partition, member.account_id, role_name)
        targets.extend({**event, "regions": [region]} for region in options.regions or (home,))
    if len(targets) > MAX_FAN_OUT_TARGETS:
        warnings.append(f"aws: {len(targets)} (account, region) targets; the fan-out takes the "
                        f"first {MAX_FAN_OUT_TARGETS}")
    return targets[:MAX_FAN_OUT_TARGETS]
