"""Enforce mode: hand each provider's planned actions to its executor, within one blast radius.

Executors are named by import path and imported only when their provider has work, so
enforcing on Kubernetes never imports boto3.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from engine.core.errors import InputError
from engine.core.model import Report
from engine.sources.registry import Collected
from remediations.runner import Deadline

# provider → (module, function, client key in Collected.clients)
EXECUTORS: dict[str, tuple[str, str, str]] = {
    "kubernetes": ("remediations.kubernetes_actions", "apply_kubernetes_remediations",
                   "kubernetes"),
    "aws": ("remediations.aws_actions", "apply_aws_remediations", "aws"),
    "gcp": ("remediations.gcp_actions", "apply_gcp_remediations", "gcp"),
    "azure": ("remediations.azure_actions", "apply_azure_remediations", "azure"),
}


def _has_planned_action(report: Report, provider: str) -> bool:
    return any(f.remediation is not None and f.remediation.status == "planned"
               and f.resource.provider == provider for f in report.findings)


def _applied(report: Report) -> int:
    return sum(1 for f in report.findings
               if f.remediation is not None and f.remediation.status in ("applied", "failed"))


def enforce_report(report: Report, collected: Collected, *, max_actions: int,
                   audit_log: Path, deadline: Deadline | None = None) -> Report:
    """Apply planned actions provider by provider; `max_actions` bounds the whole run, and
    no action is started past `deadline`."""
    if max_actions < 0:
        raise InputError("--max-actions must be 0 or more")
    budget = max_actions
    for provider, (module_name, function, client_key) in EXECUTORS.items():
        if not _has_planned_action(report, provider):
            continue
        client: Any = collected.clients.get(client_key)
        if client is None:
            continue  # resources from a snapshot: nothing live to act on
        before = _applied(report)
        apply = getattr(importlib.import_module(module_name), function)
        report = apply(report, collected.resources, client, max_actions=budget,
                       audit_log=audit_log, deadline=deadline)
        budget = max(0, budget - (_applied(report) - before))
    return report.model_copy(update={"mode": "enforce"})
