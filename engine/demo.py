"""The bundled demo estate: a GPU-heavy Terraform plan and Kubernetes objects in one snapshot."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def demo_snapshot_path() -> Path:
    return Path(str(resources.files("engine"))) / "data" / "demo" / "estate.yaml"
