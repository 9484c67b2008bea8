"""A Slack incoming webhook: one Block Kit message per run."""

from __future__ import annotations

from typing import Any

from engine.core.model import Finding
from engine.notify.digest import Digest, bounded
from engine.notify.http import post_json

SECTION_LIMIT = 2900  # Slack rejects a section text over 3000 characters


def escape(text: str) -> str:
    """Slack mrkdwn's control characters, so finding text cannot mention, link or format."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _money(value: float) -> str:
    return f"${value:,.2f}"


def _finding_line(finding: Finding) -> str:
    ref = finding.resource
    return (f"• *{escape(bounded(finding.policy, 100))}* ({finding.severity.value}) "
            f"{escape(bounded(ref.name or ref.id, 120))} — {_money(finding.estimated_monthly_usd)}"
            f"/mo\n  {escape(bounded(finding.message, 200))}")


def slack_message(digest: Digest) -> dict[str, Any]:
    head = digest.headline()
    count = len(digest.new)
    title = f"gpuwarden: {count} new failing finding{'s' * (count != 1)}"
    headline = (f"*Spend* {_money(head['monthly_spend_usd'])}/mo · "
                f"*Savings* {_money(head['savings_usd'])}/mo · "
                f"*Unallocated* {_money(head['unallocated_usd'])}/mo")
    lines = "\n".join(_finding_line(f) for f in digest.top)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title}},
        {"type": "section", "text": {"type": "mrkdwn", "text": headline}},
        {"type": "section", "text": {"type": "mrkdwn", "text": bounded(lines, SECTION_LIMIT)}},
    ]
    if count > len(digest.top):
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"and {count - len(digest.top)} more"}]})
    if digest.report_url:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": (
            f"<{escape(bounded(digest.report_url, 1000))}|Open the report>")}})
    return {"text": title, "blocks": blocks}


def send_slack(url: str, digest: Digest) -> None:
    post_json(url, slack_message(digest))
