"""The bundled demo estate: a GPU-heavy Terraform plan, Kubernetes objects, live AWS/GCP/Azure
inventory and GPU telemetry in one snapshot bundle."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def demo_snapshot_path() -> Path:
    return Path(str(resources.files("engine"))) / "data" / "demo" / "estate.yaml"


def demo_policy_paths() -> list[str]:
    """The built-in pack plus the demo's team budgets (budgets belong to a policy, not an
    estate)."""
    return ["builtin", str(demo_snapshot_path().with_name("overrides.yaml"))]
