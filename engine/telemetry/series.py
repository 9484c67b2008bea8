"""GPU readings: one `GpuSeries` per GPU (or MIG slice) and workload pod over a look-back window.

Every telemetry source (Prometheus, a dcgm-exporter endpoint, NVML, a snapshot) produces these;
the join (`engine.telemetry.join`) attaches them to resources. The DCGM label conventions live
here, so the Prometheus and the exporter readers agree on what identifies a GPU and its pod.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Compute activity, best first: (metric, scale to percent). GPU_UTIL is not valid on MIG slices.
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
NVML_UTILIZATION = "nvml.utilization.gpu"

STALE = "(stale series)"
HOST_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "nodename", "node_name")


class GpuProcess(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pid: int
    used_memory_mib: float | None = None


class GpuSeries(BaseModel):
    """What one GPU (or MIG slice) did for one pod over the window: the snapshot format too.

    `problem` says why the reading cannot be judged (NaN samples, a stale series, ambiguous
    labels); such a reading makes the resource it joins to `unknown` unless the resource has
    good readings as well.
    """

    model_config = ConfigDict(extra="forbid")

    hostname: str | None = None
    uuid: str | None = None
    gpu: str | None = None  # the device index label
    model: str | None = None  # modelName, e.g. "NVIDIA A100-SXM4-80GB"
    mig_profile: str | None = None  # GPU_I_PROFILE, e.g. "1g.10gb"
    mig_instance: str | None = None  # GPU_I_ID
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    activity_pct: float | None = None  # average compute activity over the window, 0-100
    activity_metric: str | None = None
    samples: int = 0
    window_seconds: int = 0  # 0: an instant reading
    memory_used_mib: float | None = None  # peak over the window
    memory_total_mib: float | None = None
    sm_active_pct: float | None = None
    tensor_active_pct: float | None = None
    power_w: float | None = None
    mig_mode: bool | None = None
    processes: list[GpuProcess] = Field(default_factory=list)
    problem: str | None = None
    source: str | None = None

    @property
    def is_mig_slice(self) -> bool:
        return self.mig_instance is not None or self.mig_profile is not None


    @property
    def stale(self) -> bool:
        return self.problem is not None and self.problem.endswith(STALE)

    def gpu_key(self) -> tuple[str, str, str]:
        """(host, device, MIG instance): one physical GPU or slice, whichever pod used it."""
        device = self.uuid or (f"gpu{self.gpu}" if self.gpu is not None else f"pod:{self.pod}")
        slice_id = self.mig_instance or self.mig_profile or ""
        return (self.hostname or "", device, slice_id)

    def describe(self) -> str:
        """A short human name: `GPU 0 (GPU-3431…) on node-a, MIG 1g.10gb #13`."""
        name = f"GPU {self.gpu}" if self.gpu is not None else "GPU"
        if self.uuid:
            name += f" ({self.uuid})"
        if self.hostname:
            name += f" on {self.hostname}"
        if self.is_mig_slice:
            name += f", MIG {self.mig_profile or 'slice'}"
            if self.mig_instance is not None:
                name += f" #{self.mig_instance}"
        return name


class TelemetrySection(BaseModel):
    """The `telemetry:` section of a snapshot bundle (see docs/telemetry.md)."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = None
    end: datetime | None = None
    window_seconds: int | None = None
    gpus: list[GpuSeries] = Field(default_factory=list)
    # Kubernetes objects that link pods to their workloads (Pods, ReplicaSets, Jobs), as the API
    # serves them; only metadata (name, namespace, labels, ownerReferences) and spec.nodeName
    # are read.
    owners: list[dict[str, Any]] = Field(default_factory=list)


# ---------------------------------------------------------------------------- labels


@dataclass(frozen=True, slots=True)
class SeriesLabels:
    """What a DCGM series' labels say about its GPU and its workload."""

    hostname: str | None
    uuid: str | None
    gpu: str | None
    model: str | None
    mig_profile: str | None
    mig_instance: str | None
    pod: str | None
    namespace: str | None
    container: str | None
    problem: str | None = None

    def key(self) -> tuple[str | None, ...]:
        return (self.hostname, self.uuid, self.gpu, self.mig_instance, self.mig_profile,
                self.pod, self.namespace, self.container)


def _label(labels: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def series_labels(labels: Mapping[str, str]) -> SeriesLabels:
    """Read GPU and workload identity from DCGM exporter labels.

    When Prometheus scraped the exporter without `honor_labels`, the exporter's own pod labels
    were renamed `exported_pod`/`exported_namespace`/`exported_container` and `pod`/`namespace`
    hold the exporter's pod: the exported forms win. An `exported_pod` without an
    `exported_namespace` leaves the namespace unknown (`problem` says so).
    """
    problem = None
    pod, namespace = labels.get("pod") or None, labels.get("namespace") or None
    container = labels.get("container") or None
    exported_pod = labels.get("exported_pod") or None
    if exported_pod:
        exported_namespace = labels.get("exported_namespace") or None
        if exported_namespace is None and pod and pod != exported_pod:
            problem = (f"the series names pod {pod!r} and exported_pod {exported_pod!r} but no "
                       "exported_namespace, so its workload's namespace is unknown")
        pod, namespace = exported_pod, exported_namespace
        container = labels.get("exported_container") or None
    return SeriesLabels(
        hostname=_label(labels, *HOST_LABELS),
        uuid=_label(labels, "UUID", "uuid"),
        gpu=_label(labels, "gpu"),
        model=_label(labels, "modelName"),
        mig_profile=_label(labels, "GPU_I_PROFILE"),
        mig_instance=_label(labels, "GPU_I_ID"),
        pod=pod,
        namespace=namespace,
        container=container,
        problem=problem,
    )


# ---------------------------------------------------------------------------- folding samples


@dataclass
class _Stat:
    """One metric's statistics summed over the raw series that map to the same reading."""

    weighted_sum: float = 0.0
    count: float = 0.0
    maximum: float | None = None
    minimum: float | None = None
    last: float | None = None
    nan: bool = False

    @property
    def average(self) -> float | None:
        if self.nan:
            return math.nan
        return self.weighted_sum / self.count if self.count else None


@dataclass
class _Reading:
    labels: SeriesLabels
    stats: dict[str, _Stat] = field(default_factory=dict)

    def stat(self, metric: str) -> _Stat:
        return self.stats.setdefault(metric, _Stat())


class SeriesFolder:
    """Folds per-series statistics (`avg`, `count`, `max`, `min`, `last`) into readings.

    Raw series differing only in labels gpuwarden does not read (an exporter pod restart changes
    `instance`) fold into one reading; averages are weighted by their sample counts.
    """

    def __init__(self) -> None:
        self._readings: dict[tuple[str | None, ...], _Reading] = {}
        self.unidentified = 0

    def add_series(self, metric: str, labels: Mapping[str, str], values: Mapping[str, float]
                   ) -> None:
        """`values` maps a statistic name to its value for one raw series."""
        identity = series_labels(labels)
        if not (identity.uuid or (identity.gpu is not None and identity.hostname)):
            self.unidentified += 1
            return
        reading = self._readings.setdefault(identity.key(), _Reading(identity))
        stat = reading.stat(metric)
        average, count = values.get("avg"), values.get("count")
        if average is not None:
            weight = count if count is not None else 1.0
            if math.isnan(average):
                stat.nan = True
            else:
                stat.weighted_sum += average * weight
            stat.count += weight
        if "max" in values:
            stat.maximum = _fold(max, stat.maximum, values["max"])
        if "min" in values:
            stat.minimum = _fold(min, stat.minimum, values["min"])
        if "last" in values:
            stat.last = _fold(max, stat.last, values["last"])

    def readings(self, *, window_seconds: int, source: str, check_stale: bool) -> list[GpuSeries]:
        return [_to_series(r, window_seconds, source, check_stale)
                for r in self._readings.values()]


def _fold(pick: Any, current: float | None, value: float) -> float:
    if math.isnan(value):
        return current if current is not None else value
    return value if current is None else float(pick(current, value))


def _to_series(reading: _Reading, window_seconds: int, source: str,
               check_stale: bool) -> GpuSeries:
    labels = reading.labels
    is_slice = labels.mig_instance is not None or labels.mig_profile is not None
    activity, metric, samples, problem = _activity(reading, is_slice, check_stale)
    used = reading.stats.get(FB_USED)
    free = reading.stats.get(FB_FREE)
    peak = used.maximum if used is not None and used.maximum is not None else None
    total = peak + free.minimum if peak is not None and free and free.minimum is not None \
        else None
    return GpuSeries(
        hostname=labels.hostname, uuid=labels.uuid, gpu=labels.gpu, model=labels.model,
        mig_profile=labels.mig_profile, mig_instance=labels.mig_instance, pod=labels.pod,
        namespace=labels.namespace, container=labels.container,
        activity_pct=activity, activity_metric=metric, samples=samples,
        window_seconds=window_seconds,
        memory_used_mib=_finite(peak), memory_total_mib=_finite(total),
        sm_active_pct=_percent(reading.stats.get(SM_ACTIVE), 100.0),
        tensor_active_pct=_percent(reading.stats.get(TENSOR_ACTIVE), 100.0),
        problem=labels.problem or problem,
        source=source,
    )


def _activity(reading: _Reading, is_slice: bool, check_stale: bool
              ) -> tuple[float | None, str | None, int, str | None]:
    """(average percent, metric, samples, problem) from the best activity metric present."""
    candidates = [(ENGINE_ACTIVE, 100.0)]
    if not is_slice:
        candidates.append((GPU_UTIL, 1.0))
    for metric, scale in candidates:
        stat = reading.stats.get(metric)
        if stat is None or not stat.count:
            continue
        samples = int(stat.count)
        if stat.nan:
            return None, metric, samples, f"{metric} has NaN samples in the window"
        if check_stale and stat.last is None:
            return None, metric, samples, (f"{metric} stopped reporting before the end of the "
                                           f"window {STALE}")
        average = stat.average
        assert average is not None
        return min(100.0, max(0.0, average * scale)), metric, samples, None
    if is_slice and GPU_UTIL in reading.stats:
        return None, None, 0, (f"{GPU_UTIL} is not valid on MIG slices and {ENGINE_ACTIVE} "
                               "(profiling metrics) is not collected")
    return None, None, 0, f"no activity metric ({ENGINE_ACTIVE} or {GPU_UTIL}) for this GPU"


def _percent(stat: _Stat | None, scale: float) -> float | None:
    if stat is None:
        return None
    average = stat.average
    return None if average is None or math.isnan(average) else average * scale


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


# ---------------------------------------------------------------------------- cleaning up


def drop_mig_parents(readings: Iterable[GpuSeries]) -> list[GpuSeries]:
    """Whole-GPU readings of a GPU that also has MIG slice readings are dropped: the slices
    stand for that GPU, and counting both would count its silicon twice."""
    readings = list(readings)
    partitioned = {(r.hostname, r.uuid or r.gpu) for r in readings if r.is_mig_slice}
    return [r for r in readings
            if r.is_mig_slice or (r.hostname, r.uuid or r.gpu) not in partitioned]
