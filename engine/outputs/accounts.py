"""Findings grouped by account (AWS account, GCP project, Azure subscription): the breakdown the
table and the Markdown comment add after an `--organization` scan."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.core.evaluate import savings_total
from engine.core.model import Finding

NO_ACCOUNT = "(no account)"
MAX_ACCOUNT_ROWS = 200  # the summary's by_account keeps every account


@dataclass(frozen=True, slots=True)
class AccountRow:
    """One account's failing and unknown findings, and what fixing them saves a month."""

    provider: str
    account: str
    failing: int
    unknown: int
    savings_usd: float


def account_rows(findings: Iterable[Finding]) -> tuple[AccountRow, ...]:
    """Failing and unknown findings per (provider, account), most savings first."""
    grouped: dict[tuple[str, str], list[Finding]] = {}
    for finding in findings:
        if finding.result == "pass":
            continue
        key = (finding.resource.provider, finding.resource.account or NO_ACCOUNT)
        grouped.setdefault(key, []).append(finding)
    rows = [
        AccountRow(provider=provider, account=account,
                   failing=sum(1 for f in group if f.result == "fail"),
                   unknown=sum(1 for f in group if f.result == "unknown"),
                   savings_usd=savings_total(f for f in group if f.result == "fail"))
        for (provider, account), group in grouped.items()
    ]
    rows.sort(key=lambda row: (-row.savings_usd, -row.failing, row.provider, row.account))
    return tuple(rows[:MAX_ACCOUNT_ROWS])
