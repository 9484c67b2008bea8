"""A dcgm-exporter `/metrics` endpoint read directly: one instant reading per GPU.

The exposition text is parsed with prometheus-client's parser; the same label rules as the
Prometheus path apply. An instant reading has `window_seconds = 0` and one sample, so it shows
memory and current activity but cannot by itself prove a GPU idle over a policy's window.
"""

from __future__ import annotations

import math
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from engine.core.errors import InputError
from engine.telemetry.prometheus import METRIC_STATS, FetchResult
from engine.telemetry.series import SeriesFolder, drop_mig_parents


def parse_exporter_text(text: str, *, source: str = "dcgm") -> FetchResult:
    """Readings from dcgm-exporter text; unparsable text is a failure with its reason."""
    from prometheus_client.parser import text_string_to_metric_families

    folder = SeriesFolder()
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in METRIC_STATS:
                    _add_sample(folder, sample.name, sample.labels, float(sample.value))
    except ValueError as exc:
        reason = f"{source}: not Prometheus exposition text ({' '.join(str(exc).split())})"
        return FetchResult(failure=reason, warnings=[f"telemetry: {reason}"])
    warnings = []
    if folder.unidentified:
        warnings.append(f"telemetry: {folder.unidentified} DCGM samples without GPU labels "
                        f"(UUID, or gpu and Hostname) in {source} were ignored")
    readings = folder.readings(window_seconds=0, source=source, check_stale=False)
    return FetchResult(readings=drop_mig_parents(readings), warnings=warnings)


def _add_sample(folder: SeriesFolder, metric: str, labels: dict[str, str], value: float) -> None:
    stats = METRIC_STATS[metric]
    values = {"avg": value, "count": 1.0} if "avg" in stats else {}
    for stat in ("max", "min"):
        if stat in stats:
            values[stat] = value
    if "last" in stats and not math.isnan(value):
        values["last"] = time.time()
    folder.add_series(metric, labels, values)


def fetch_exporter(url: str, *, timeout_s: float, ca_file: str | None = None) -> FetchResult:
    """GET a dcgm-exporter endpoint and read it; an outage is a failure with its reason."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InputError(f"--dcgm-url: not an http(s) URL: {url!r}")
    context = ssl.create_default_context(cafile=ca_file) if parsed.scheme == "https" else None
    request = urllib.request.Request(url, headers={"Accept": "text/plain", "User-Agent":
                                                   "gpuwarden"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            text = response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return _failed(f"dcgm-exporter at {url} answered HTTP {exc.code} {exc.reason or ''}"
                       .rstrip())
    except TimeoutError:
        return _failed(f"dcgm-exporter at {url} did not answer within {timeout_s:g}s")
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return _failed(f"dcgm-exporter at {url} did not answer within {timeout_s:g}s")
        reason = getattr(exc.reason, "strerror", None) or str(exc.reason)
        return _failed(f"dcgm-exporter at {url} is unreachable: {reason}")
    except (OSError, ValueError) as exc:
        return _failed(f"dcgm-exporter at {url} is unreachable: {exc}")
    return parse_exporter_text(text, source=f"dcgm-exporter at {url}")


def _failed(reason: str) -> FetchResult:
    return FetchResult(failure=reason, warnings=[f"telemetry: {reason}"])
