"""Reporters: each renders a Report (plus policy metadata) to one output format."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.core.model import Report


@dataclass(frozen=True, slots=True)
class PolicyMeta:
    """What a reporter needs to know about a policy (SARIF rules, PR comment help)."""

    id: str
    title: str
    description: str
    severity: str
    help: str = ""  # how to fix, one or two sentences
    help_uri: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceFacts:
    """What the HTML report's charts group a scanned GPU resource by, and what it costs."""

    provider: str
    id: str
    team: str | None
    account: str | None
    monthly_spend_usd: float


@dataclass(frozen=True, slots=True)
class RenderContext:
    report: Report
    policies: Mapping[str, PolicyMeta] = field(default_factory=dict)
    source_file: str | None = None  # the plan / snapshot scanned; SARIF's fallback location
    tool_version: str = "0.1.0"
    max_chars: int = 60_000  # Markdown PR comment budget (GitHub's limit is 65,536)
    width: int | None = None  # terminal table columns; None: the table's default
    by_account: bool = False  # add the findings per account (an --organization scan)
    resources: tuple[ResourceFacts, ...] = ()  # HTML charts by team; empty: by finding only
    trend: tuple[Mapping[str, Any], ...] = ()  # HTML: `gpuwarden history` rows, oldest first


Renderer = Callable[[RenderContext], str]
