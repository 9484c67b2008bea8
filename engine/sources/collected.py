"""What a scan source gathers, and saving a gathering as a snapshot bundle.

Every adapter exposes `collect(arg, options, catalog) -> Collected`; this module is that
contract, kept apart from the registry that finds adapters and from the snapshot reader, so
adapters, the registry and the snapshot source all depend on it and not on each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from engine.core.catalog import Catalog
from engine.core.errors import InputError
from engine.core.model import Resource

T = TypeVar("T")


@dataclass(frozen=True)
class ScanOptions:
    """Source settings from the CLI or the Lambda event; each adapter reads what it needs."""

    regions: tuple[str, ...] = ()
    role_arns: tuple[str, ...] = ()
    profile: str | None = None
    projects: tuple[str, ...] = ()
    subscriptions: tuple[str, ...] = ()
    # Whole organisations: every active AWS member account (assuming `role_name` in each), every
    # active GCP project (under `folders`, when named), every enabled Azure subscription.
    organization: bool = False
    role_name: str | None = None
    folders: tuple[str, ...] = ()  # GCP: "folders/ID" or "organizations/ID"
    max_accounts: int = 1000  # most accounts / projects / subscriptions one scan reads
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
    # False: nothing will save or act on what the sources read (a dry run without
    # --save-snapshot or history), so a source may let go of native objects no later stage
    # reads (`Collected.snapshot` then holds only what the telemetry join needs).
    keep_natives: bool = True
    # False as well: no policy reads a resource's `raw`, so a source may also let go of the
    # native copy a resource holds when no later stage reads it (the telemetry join reads
    # those of instances).
    keep_raw: bool = True

    @property
    def wants_telemetry(self) -> bool:
        return bool(self.prometheus_url or self.dcgm_url)


def within_account_limit(items: list[T], limit: int, what: str, warnings: list[str]) -> list[T]:
    """The first `limit` accounts / projects / subscriptions of an `--organization` scan; a
    warning for the rest. `what`: "gcp: active projects", "azure: enabled subscriptions"."""
    if len(items) > limit:
        source, _, noun = what.partition(": ")
        warnings.append(f"{source}: {len(items) - limit} more {noun} than --max-accounts "
                        f"{limit}; they were not scanned")
    return items[:limit]


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


def dump_snapshot(bundle: Mapping[str, Any]) -> bytes:
    return orjson.dumps(bundle, option=orjson.OPT_INDENT_2)


def write_snapshot(collected: Collected, path: Path, captured_at: str) -> None:
    bundle = {"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot", "captured_at": captured_at,
              **collected.snapshot}
    try:
        path.write_bytes(dump_snapshot(bundle))
    except OSError as exc:
        raise InputError(f"cannot write snapshot: {exc.strerror or exc}", file=str(path)) from None
