"""What a notification says: the run's headline dollars and the new failing findings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.core.model import Finding, Report

TOP_FINDINGS = 10
TEXT_LIMIT = 300  # characters of any one finding field in a message


def finding_key(finding: Finding) -> str:
    """A finding's identity across runs: its policy and its resource."""
    ref = finding.resource
    return f"{finding.policy}|{ref.provider}|{ref.id}"


@dataclass(frozen=True, slots=True)
class Digest:
    report: Report
    new: tuple[Finding, ...]  # the new failing findings, the costliest first
    report_url: str | None = None

    @property
    def top(self) -> tuple[Finding, ...]:
        return self.new[:TOP_FINDINGS]

    def headline(self) -> dict[str, float]:
        summary = self.report.summary
        return {"monthly_spend_usd": round(summary.monthly_spend_usd, 2),
                "savings_usd": round(summary.savings_usd, 2),
                "unallocated_usd": round(summary.unallocated_usd, 2)}

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.report.generated_at.isoformat(),
            "mode": self.report.mode,
            "summary": {**self.headline(), "failed": self.report.summary.failed},
            "new_findings": len(self.new),
            "findings": [_finding_json(f) for f in self.top],
            "report_url": self.report_url,
        }


def bounded(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _finding_json(finding: Finding) -> dict[str, Any]:
    ref = finding.resource
    return {"policy": bounded(finding.policy), "severity": finding.severity.value,
            "resource": {"provider": bounded(ref.provider), "kind": bounded(ref.kind),
                         "id": bounded(ref.id), "name": bounded(ref.name)},
            "message": bounded(finding.message),
            "estimated_monthly_usd": round(finding.estimated_monthly_usd, 2),
            "cost_kind": finding.cost_kind}


def failing(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.result == "fail"]


def build_digest(report: Report, already: set[str], report_url: str | None) -> Digest:
    new = [f for f in failing(report.findings) if finding_key(f) not in already]
    new.sort(key=lambda f: -f.estimated_monthly_usd)
    return Digest(report, tuple(new), report_url)
