"""DCGM metrics through Prometheus's HTTP API: one batched PromQL query per metric.

Each query asks for every GPU at once (never one query per GPU) and returns the statistics of
that metric over the look-back window, told apart by a `gpuwarden_stat` label:

    label_replace(avg_over_time(M[3600s]), "gpuwarden_stat", "avg", "", "")
    or label_replace(count_over_time(M[3600s]), "gpuwarden_stat", "count", "", "")
    or label_replace(timestamp(M), "gpuwarden_stat", "last", "", "")

The queries run concurrently under one timeout budget. Failures are reported, not raised: the
scan goes on and the GPUs concerned are `unknown`. Only the standard library talks HTTP here.
"""

from __future__ import annotations

import base64
import math
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from engine.core.errors import InputError
from engine.telemetry.series import (
    ENGINE_ACTIVE,
    FB_FREE,
    FB_USED,
    GPU_UTIL,
    SM_ACTIVE,
    TENSOR_ACTIVE,
    GpuSeries,
    SeriesFolder,
    drop_mig_parents,
)

STAT_LABEL = "gpuwarden_stat"
# metric -> statistics asked for it
METRIC_STATS: dict[str, tuple[str, ...]] = {
    ENGINE_ACTIVE: ("avg", "count", "last"),
    GPU_UTIL: ("avg", "count", "last"),
    FB_USED: ("max",),
    FB_FREE: ("min",),
    SM_ACTIVE: ("avg",),
    TENSOR_ACTIVE: ("avg",),
}
ACTIVITY_METRICS = (ENGINE_ACTIVE, GPU_UTIL)
_STAT_EXPRESSIONS = {
    "avg": "avg_over_time({metric}[{window}s])",
    "count": "count_over_time({metric}[{window}s])",
    "max": "max_over_time({metric}[{window}s])",
    "min": "min_over_time({metric}[{window}s])",
    "last": "timestamp({metric})",
}


class PrometheusError(Exception):
    """A query that did not give an answer; `str()` is one line saying why."""


@dataclass(frozen=True)
class PrometheusSettings:
    url: str
    token: str | None = None
    basic_auth: str | None = None  # "user:password"
    ca_file: str | None = None
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InputError(f"--prometheus-url: not an http(s) URL: {self.url!r}")
        if self.token and self.basic_auth:
            raise InputError("give --prometheus-token or --prometheus-basic-auth, not both")
        if self.basic_auth is not None and ":" not in self.basic_auth:
            raise InputError("--prometheus-basic-auth must be user:password")
        if self.ca_file is not None and not Path(self.ca_file).is_file():
            raise InputError("CA bundle not found", file=self.ca_file)
        if self.timeout_s <= 0:
            raise InputError("the telemetry timeout must be positive")


@dataclass
class FetchResult:
    """Readings from one source; `failure` when no activity metric could be read at all."""

    readings: list[GpuSeries] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failure: str | None = None


def metric_query(metric: str, stats: tuple[str, ...], window_s: int) -> str:
    """One PromQL expression returning every statistic of `metric` for every GPU (a single
    statistic needs no label to tell it apart: label_replace is not free on 10,000 series)."""
    expressions = [_STAT_EXPRESSIONS[s].format(metric=metric, window=window_s) for s in stats]
    if len(expressions) == 1:
        return expressions[0]
    return " or ".join(f'label_replace({expression}, "{STAT_LABEL}", "{stat}", "", "")'
                       for expression, stat in zip(expressions, stats, strict=True))


class PrometheusClient:
    """Instant queries against `/api/v1/query`, all sharing one deadline."""

    def __init__(self, settings: PrometheusSettings, deadline: float | None = None):
        self.settings = settings
        self.deadline = deadline if deadline is not None else time.monotonic() + \
            settings.timeout_s
        self._endpoint = settings.url.rstrip("/") + "/api/v1/query"
        self._context = ssl.create_default_context(cafile=settings.ca_file) \
            if settings.url.startswith("https") else None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "gpuwarden",
                   "Content-Type": "application/x-www-form-urlencoded"}
        if self.settings.token:
            headers["Authorization"] = f"Bearer {self.settings.token}"
        elif self.settings.basic_auth:
            encoded = base64.b64encode(self.settings.basic_auth.encode()).decode()
            headers["Authorization"] = f"Basic {encoded}"
        return headers

    def query(self, promql: str, at: datetime) -> list[dict[str, Any]]:
        """The instant vector `promql` evaluates to at `at`; PrometheusError otherwise."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise PrometheusError(self._timeout_text())
        body = urllib.parse.urlencode({"query": promql, "time": f"{at.timestamp():.3f}"})
        request = urllib.request.Request(self._endpoint, data=body.encode(), method="POST",
                                         headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=remaining,
                                        context=self._context) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise PrometheusError(_http_error_text(exc)) from None
        except TimeoutError:
            raise PrometheusError(self._timeout_text()) from None
        except urllib.error.URLError as exc:
            raise PrometheusError(self._connection_text(exc.reason)) from None
        except (OSError, ValueError) as exc:  # connection reset, malformed response line
            raise PrometheusError(self._connection_text(exc)) from None
        return _vector(payload)

    def _timeout_text(self) -> str:
        return (f"Prometheus at {self.settings.url} did not answer within the "
                f"{self.settings.timeout_s:g}s telemetry timeout")

    def _connection_text(self, reason: Any) -> str:
        if isinstance(reason, TimeoutError):
            return self._timeout_text()
        if isinstance(reason, ssl.SSLCertVerificationError):
            return (f"Prometheus at {self.settings.url}: TLS certificate not trusted "
                    f"({reason.verify_message}); give its CA with --prometheus-ca")
        text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        return f"Prometheus at {self.settings.url} is unreachable: {_one_line(text)}"


def _vector(payload: bytes) -> list[dict[str, Any]]:
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise PrometheusError("the answer is not Prometheus API JSON") from None
    if not isinstance(document, dict) or document.get("status") != "success":
        raise PrometheusError(_api_error_text(document))
    data = document.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or \
            not isinstance(data.get("result"), list):
        raise PrometheusError("the answer is not an instant vector")
    return [item for item in data["result"] if isinstance(item, dict)]


def _api_error_text(document: Any) -> str:
    if isinstance(document, dict) and document.get("error"):
        kind = document.get("errorType") or "error"
        return f"Prometheus refused the query: {kind}: {_one_line(str(document['error']))}"
    return "the answer is not Prometheus API JSON"


def _http_error_text(exc: urllib.error.HTTPError) -> str:
    try:
        document = orjson.loads(exc.read() or b"null")
    except (orjson.JSONDecodeError, OSError):
        document = None
    detail = ""
    if isinstance(document, dict) and document.get("error"):
        detail = f": {document.get('errorType') or 'error'}: {_one_line(str(document['error']))}"
    return f"Prometheus answered HTTP {exc.code} {exc.reason or ''}".rstrip() + detail


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------- fetching


def fetch_gpu_series(settings: PrometheusSettings, window_s: int, now: datetime,
                     client: PrometheusClient | None = None) -> FetchResult:
    """Every GPU's readings over `window_s` seconds ending at `now`."""
    client = client or PrometheusClient(settings)
    results: dict[str, _Grouped | PrometheusError] = {}

    def run(metric: str) -> None:
        stats = METRIC_STATS[metric]
        try:
            # grouped here, so one answer is read while Prometheus still computes the others
            results[metric] = _group_by_series(
                client.query(metric_query(metric, stats, window_s), now), stats)
        except PrometheusError as exc:
            results[metric] = exc

    with ThreadPoolExecutor(max_workers=len(METRIC_STATS)) as pool:
        list(pool.map(run, METRIC_STATS))
    return _readings_from(results, window_s)


_Grouped = dict[tuple[tuple[str, str], ...], dict[str, float]]


def _readings_from(results: Mapping[str, _Grouped | PrometheusError], window_s: int
                   ) -> FetchResult:
    failures = {m: r for m, r in results.items() if isinstance(r, PrometheusError)}
    if all(metric in failures for metric in ACTIVITY_METRICS):
        reason = str(failures[ENGINE_ACTIVE])
        return FetchResult(failure=reason, warnings=[f"telemetry: {reason}"])
    folder = SeriesFolder()
    for metric, grouped in results.items():
        if not isinstance(grouped, PrometheusError):
            for labels, values in grouped.items():
                folder.add_series(metric, dict(labels), values)
    warnings = [f"telemetry: {metric} not read: {failure}"
                for metric, failure in failures.items()]
    if folder.unidentified:
        warnings.append(f"telemetry: {folder.unidentified} DCGM series without GPU labels "
                        "(UUID, or gpu and Hostname) were ignored")
    readings = drop_mig_parents(folder.readings(window_seconds=window_s, source="prometheus",
                                                check_stale=True))
    return FetchResult(readings=readings, warnings=warnings)


def _group_by_series(result: list[dict[str, Any]], stats: tuple[str, ...]) -> _Grouped:
    """Result items grouped by their labels without the statistic label: stat → value."""
    grouped: _Grouped = {}
    only = stats[0] if len(stats) == 1 else None
    for item in result:
        labels = item.get("metric")
        value = item.get("value")
        if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
            continue
        stat = labels.pop(STAT_LABEL, only)
        if stat is None:
            continue
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            number = math.nan
        # Prometheus sorts a series' labels by name, so the items are a stable key
        grouped.setdefault(tuple(labels.items()), {})[str(stat)] = number
    return grouped
