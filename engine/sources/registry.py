"""Scan sources by name: `--source NAME[:ARG]` → the adapter that collects it.

Adapters are named by import path and imported only when asked for, so a scan of a snapshot
never imports boto3, and a scan of AWS never imports the Google SDK. Each adapter module
exposes `collect(arg, options, catalog) -> Collected` (`engine.sources.collected`, re-exported
here with `write_snapshot` for the entry points).
"""

from __future__ import annotations

import importlib

from engine.core.catalog import Catalog
from engine.core.errors import InputError, install_hint
from engine.sources.collected import Collected, Collector, ScanOptions, write_snapshot

__all__ = ["SOURCES", "Collected", "Collector", "ScanOptions", "collect_sources", "collector",
           "write_snapshot"]

SOURCES: dict[str, str] = {
    "snapshot": "engine.sources.snapshot",
    "k8s": "engine.sources.kubernetes.live",
    "aws": "engine.sources.aws",
    "gcp": "engine.sources.gcp",
    "azure": "engine.sources.azure",
}


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

