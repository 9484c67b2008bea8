"""Collect GPU readings from every telemetry source a scan was given.

Sources: the `telemetry:` section of snapshot bundles, Prometheus (`--prometheus-url`), a
dcgm-exporter endpoint (`--dcgm-url`). A source that fails gives a warning and an outage
reason, never an exception: the scan goes on and the GPUs concerned are `unknown`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.sources.registry import Collected, ScanOptions
from engine.telemetry.prometheus import FetchResult
from engine.telemetry.series import GpuSeries


@dataclass
class Gathered:
    readings: list[GpuSeries] = field(default_factory=list)
    owners: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    outages: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def add(self, result: FetchResult, source: str) -> None:
        self.readings.extend(result.readings)
        self.warnings.extend(result.warnings)
        if result.failure:
            self.outages.append(result.failure)
        self.sources.append(source)

    @property
    def outage(self) -> str | None:
        return "; ".join(self.outages) or None


def gather(collected: Collected, options: ScanOptions, now: datetime) -> Gathered:
    from engine.telemetry.snapshot import parse_section

    gathered = Gathered()
    section = collected.snapshot.get("telemetry")
    if section is not None:
        parsed = parse_section(section)
        gathered.readings.extend(parsed.gpus)
        gathered.owners.extend(parsed.owners)
        gathered.sources.append(parsed.source or "snapshot")
    if options.prometheus_url:
        from engine.telemetry.prometheus import PrometheusSettings, fetch_gpu_series

        settings = PrometheusSettings(
            options.prometheus_url, options.prometheus_token, options.prometheus_basic_auth,
            options.prometheus_ca, options.telemetry_timeout_s)
        gathered.add(fetch_gpu_series(settings, options.telemetry_window_s, now),
                     f"prometheus {options.prometheus_url}")
    if options.dcgm_url:
        from engine.telemetry.dcgm import fetch_exporter

        gathered.add(fetch_exporter(options.dcgm_url, timeout_s=options.telemetry_timeout_s,
                                    ca_file=options.prometheus_ca),
                     f"dcgm-exporter {options.dcgm_url}")
    _add_live_pod_owners(gathered, collected)
    return gathered


def kubernetes_objects(collected: Collected) -> tuple[list[Mapping[str, Any]], str | None]:
    """The scanned Kubernetes objects and the cluster name, from the snapshot sections."""
    section = collected.snapshot.get("kubernetes")
    if not isinstance(section, Mapping):
        return [], None
    objects = [o for o in section.get("objects") or [] if isinstance(o, Mapping)]
    cluster = section.get("cluster")
    return objects, str(cluster) if cluster else None


def _add_live_pod_owners(gathered: Gathered, collected: Collected) -> None:
    """Controller-owned pods are not part of a cluster listing (their controllers stand for
    them), yet DCGM names them: list the ones the readings name, to follow their owners."""
    api_client = collected.clients.get("kubernetes")
    if api_client is None:
        return
    objects, _ = kubernetes_objects(collected)
    known = {((o.get("metadata") or {}).get("namespace") or "default",
              (o.get("metadata") or {}).get("name"))
             for o in [*objects, *gathered.owners] if o.get("kind") == "Pod"}
    wanted = {(r.namespace, r.pod) for r in gathered.readings
              if r.pod and r.namespace and (r.namespace, r.pod) not in known}
    if not wanted:
        return
    from engine.telemetry.owners import list_pod_owners

    try:
        gathered.owners.extend(list_pod_owners(api_client, wanted))
    except Exception as exc:  # an API error must not stop the scan; the join falls back
        reason = " ".join(str(exc).split()) or type(exc).__name__
        gathered.warnings.append(f"telemetry: cannot list pods to join GPU readings: {reason}")
