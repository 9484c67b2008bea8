"""Scan sources by name: `--source NAME[:ARG]` → the adapter that collects it.

Adapters are named by import path and imported only when asked for, so a scan of a snapshot
never imports boto3, and a scan of AWS never imports the Google SDK. Each adapter module
exposes `collect(arg, options, catalog) -> Collected`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.catalog import Catalog
from engine.errors import InputError, install_hint
from engine.model import Resource

SOURCES: dict[str, str] = {
    "snapshot": "engine.sources.snapshot",
    "k8s": "engine.sources.kubernetes_live",
    "aws": "engine.sources.aws",
    "gcp": "engine.sources.gcp",
    "azure": "engine.sources.azure",
}


@dataclass(frozen=True)
class ScanOptions:
    """Source settings from the CLI or the Lambda event; each adapter reads what it needs."""

    regions: tuple[str, ...] = ()
    role_arns: tuple[str, ...] = ()
    profile: str | None = None
    projects: tuple[str, ...] = ()
    subscriptions: tuple[str, ...] = ()
    kubeconfig: str | None = None
    context: str | None = None
    max_workers: int = 8
    # GPU telemetry (joined to the resources after collection)
    prometheus_url: str | None = None
    prometheus_token: str | None = None
    prometheus_basic_auth: str | None = None  # "user:password"
    prometheus_ca: str | None = None
    dcgm_url: str | None = None
    telemetry_window_s: int = 3600
    telemetry_timeout_s: float = 10.0

    @property
    def wants_telemetry(self) -> bool:
        return bool(self.prometheus_url or self.dcgm_url)


@dataclass
class Collected:
    """What one source gathered.

    `snapshot` holds the native objects under their snapshot section names, so a scan can be
    saved and replayed offline; `clients` holds live API clients the remediation executors
    reuse; `warnings` are partial failures (one region denied) that did not stop the scan.
    """

    resources: list[Resource] = field(default_factory=list)
    snapshot: dict[str, Any] = field(default_factory=dict)
    clients: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def merge(self, other: Collected) -> None:
        self.resources.extend(other.resources)
        for section, value in other.snapshot.items():
            if isinstance(value, list) and isinstance(self.snapshot.get(section), list):
                self.snapshot[section].extend(value)
            else:
                self.snapshot[section] = value
        self.clients.update(other.clients)
        self.warnings.extend(other.warnings)


Collector = Callable[[str | None, ScanOptions, Catalog], Collected]


def collector(name: str) -> Collector:
    module_name = SOURCES.get(name)
    if module_name is None:
        raise InputError(f"unknown source {name!r} (one of: {', '.join(SOURCES)}; "
                         "snapshot takes a file: snapshot:FILE)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise InputError(f"source {name!r} needs a package that is not installed: {exc.name} "
                         f"({install_hint(name if name in ('gcp', 'azure') else 'all')})") from None
    collect: Collector = module.collect
    return collect


def collect_sources(specs: list[str], options: ScanOptions, catalog: Catalog) -> Collected:
    collected = Collected()
    for spec in specs:
        name, _, arg = spec.partition(":")
        collected.merge(collector(name)(arg or None, options, catalog))
    return collected


def write_snapshot(collected: Collected, path: Path, captured_at: str) -> None:
    from engine.sources.snapshot import dump_snapshot

    bundle = {"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot", "captured_at": captured_at,
              **collected.snapshot}
    try:
        path.write_bytes(dump_snapshot(bundle))
    except OSError as exc:
        raise InputError(f"cannot write snapshot: {exc.strerror or exc}", file=str(path)) from None
