"""What a report asks people to do, in money: the figures of a summary apart (spend, savings,
spend with no owner, over budget), "what to do first" as actions ranked by what they save, and
spend with no owner listed apart (tagging saves nothing; it gives the spend an owner)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.core.model import Finding, Summary

# Each savings policy's fix, as an action on the resource (`{name}`).
ACTION_PHRASES = {
    "gpu-spot-required": "Move {name} to spot",
    "gpu-off-hours-shutdown": "Stop {name} outside business hours",
    "gpu-idle": "Stop or scale down {name}, which sits idle",
    "gpu-underutilized": "Consolidate the under-used GPUs of {name}",
    "gpu-right-size": "Move {name} to a smaller or newer GPU type",
    "gpu-mig-for-small-jobs": "Give {name} a MIG slice instead of a whole GPU",
}
KIND_LABELS = {"savings": "saves", "unallocated": "no owner", "over_budget": "over budget"}


@dataclass(frozen=True, slots=True)
class Action:
    """One thing to do and what it is worth per month."""

    before: str  # the words before the resource's name
    name: str
    after: str  # the words after it
    monthly_usd: float
    finding: Finding

    @property
    def text(self) -> str:
        """One line, the name as inline code: "Move `train` to spot: saves about $9,617/month"."""
        return f"{self.before}`{self.name}`{self.after}"

    @property
    def other_id(self) -> str:
        """The resource's id where the text names it by another name, else ""."""
        ref = self.finding.resource
        return ref.id if ref.id != (ref.name or ref.id) else ""


def usd(amount: float) -> str:
    return f"${amount:,.2f}"


def figure(finding: Finding) -> str:
    """A finding's dollars with their kind: `saves $9,617.45`, `no owner $16,029.08`."""
    label = KIND_LABELS.get(finding.cost_kind)
    amount = usd(finding.estimated_monthly_usd)
    return f"{label} {amount}" if label and finding.estimated_monthly_usd else amount


def money_line(summary: Summary) -> str:
    """The summary's figures, each its own kind: they are never added together."""
    return (f"GPU spend {usd(summary.monthly_spend_usd)}/month · savings "
            f"{usd(summary.savings_usd)}/month · spend with no owner "
            f"{usd(summary.unallocated_usd)}/month · over budget "
            f"{usd(summary.over_budget_usd)}/month")


def _name(finding: Finding) -> str:
    return finding.resource.name or finding.resource.id


def action_words(finding: Finding, title: str) -> tuple[str, str]:
    """The action's words before and after the resource's name."""
    phrase = ACTION_PHRASES.get(finding.policy)
    if phrase is not None:
        before, _, after = phrase.partition("{name}")
        return before, after
    return f"Fix “{title or finding.policy}” on ", ""


def _costliest(findings: Iterable[Finding], kind: str) -> list[Finding]:
    chosen = [f for f in findings
              if f.result == "fail" and f.cost_kind == kind and f.estimated_monthly_usd > 0]
    return sorted(chosen, key=lambda f: (-f.estimated_monthly_usd, f.policy, f.resource.id))


def first_actions(findings: Iterable[Finding], titles: dict[str, str], limit: int
                  ) -> tuple[Action, ...]:
    """The `limit` fixes that save the most, each phrased as an action."""
    actions: list[Action] = []
    for f in _costliest(findings, "savings")[:limit]:
        before, after = action_words(f, titles.get(f.policy, f.title))
        actions.append(Action(before, _name(f), f"{after}: saves about "
                              f"{usd(f.estimated_monthly_usd)}/month", f.estimated_monthly_usd, f))
    return tuple(actions)


def unowned(findings: Iterable[Finding], limit: int) -> tuple[Action, ...]:
    """The largest spend with no owner, one line per resource."""
    seen: set[tuple[str, str]] = set()
    found: list[Action] = []
    for f in _costliest(findings, "unallocated"):
        key = (f.resource.provider, f.resource.id)
        if key in seen:
            continue
        seen.add(key)
        missing = f.details.get("missing_tags") or []
        tags = f": add {', '.join(str(t) for t in missing)}" if missing else ""
        found.append(Action("", _name(f), f" {usd(f.estimated_monthly_usd)}/month{tags}",
                            f.estimated_monthly_usd, f))
        if len(found) == limit:
            break
    return tuple(found)
