"""This node's GPUs through NVML (module `pynvml` from the `nvidia-ml-py` package).

`pynvml` is imported inside `read_nvml` only, and any NVML object with the same functions can be
passed in (tests inject a fake). Without NVIDIA drivers the result carries one line saying so
and no GPUs; nothing here raises for a missing driver.

One read is an instant reading (`window_seconds = 0`); `duration_s` samples utilization every
`interval_s` seconds and averages, so the reading covers that window.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.telemetry.series import NVML_UTILIZATION, GpuProcess, GpuSeries

_MIB = 1024.0 * 1024.0
_MIG_NAME = re.compile(r"MIG\s+(\d+g\.\d+gb)", re.IGNORECASE)


@dataclass
class NvmlResult:
    readings: list[GpuSeries] = field(default_factory=list)
    driver_version: str | None = None
    error: str | None = None  # why NVML could not be read at all ("no NVML")


def default_hostname() -> str:
    """The Kubernetes node name when running in a pod (NODE_NAME), else the host name."""
    import os

    return os.environ.get("NODE_NAME") or socket.gethostname()


def read_nvml(*, nvml: Any = None, hostname: str | None = None, duration_s: float = 0.0,
              interval_s: float = 1.0, sleep: Callable[[float], None] = time.sleep
              ) -> NvmlResult:
    """Every GPU and MIG device NVML sees, with utilization, memory, processes and power."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return NvmlResult(error="no NVML: the nvidia-ml-py package is not installed")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return NvmlResult(error=f"no NVML: {exc} (no NVIDIA driver on this machine?)")
    except OSError as exc:
        return NvmlResult(error=f"no NVML: {exc}")
    try:
        return _read_devices(nvml, hostname or default_hostname(), duration_s, interval_s, sleep)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _read_devices(nvml: Any, hostname: str, duration_s: float, interval_s: float,
                  sleep: Callable[[float], None]) -> NvmlResult:
    result = NvmlResult(driver_version=_optional(nvml, nvml.nvmlSystemGetDriverVersion))
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        return NvmlResult(error=f"no NVML: cannot count GPUs: {exc}")
    handles = []
    for index in range(count):
        try:
            handles.append((index, nvml.nvmlDeviceGetHandleByIndex(index)))
        except nvml.NVMLError as exc:
            result.readings.append(GpuSeries(hostname=hostname, gpu=str(index), source="nvml",
                                             problem=f"NVML cannot open GPU {index}: {exc}"))
    utilization = _sample_utilization(nvml, [h for _, h in handles], duration_s, interval_s,
                                      sleep)
    window = int(duration_s) if duration_s > 0 else 0
    for (index, handle), samples in zip(handles, utilization, strict=True):
        result.readings.extend(_device_readings(nvml, hostname, index, handle, samples, window))
    return result


def _sample_utilization(nvml: Any, handles: list[Any], duration_s: float, interval_s: float,
                        sleep: Callable[[float], None]) -> list[list[float]]:
    rounds = max(1, int(duration_s / interval_s) + 1) if duration_s > 0 else 1
    samples: list[list[float]] = [[] for _ in handles]
    for number in range(rounds):
        if number:
            sleep(interval_s)
        for position, handle in enumerate(handles):
            rates = _optional(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
            if rates is not None:
                samples[position].append(float(rates.gpu))
    return samples


def _device_readings(nvml: Any, hostname: str, index: int, handle: Any,
                     utilization: list[float], window: int) -> list[GpuSeries]:
    uuid = _text(_optional(nvml, nvml.nvmlDeviceGetUUID, handle))
    name = _text(_optional(nvml, nvml.nvmlDeviceGetName, handle))
    memory = _optional(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    mig_mode = _mig_mode(nvml, handle)
    power = _optional(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
    whole = GpuSeries(
        hostname=hostname, uuid=uuid, gpu=str(index), model=name,
        activity_pct=sum(utilization) / len(utilization) if utilization else None,
        activity_metric=NVML_UTILIZATION if utilization else None,
        samples=len(utilization), window_seconds=window,
        memory_used_mib=memory.used / _MIB if memory is not None else None,
        memory_total_mib=memory.total / _MIB if memory is not None else None,
        power_w=power / 1000.0 if power is not None else None,
        mig_mode=mig_mode, processes=_processes(nvml, handle), source="nvml",
        problem=None if utilization else "NVML reports no utilization for this GPU",
    )
    slices = _mig_devices(nvml, hostname, index, handle, uuid, name) if mig_mode else []
    return [whole, *slices]


def _mig_mode(nvml: Any, handle: Any) -> bool | None:
    modes = _optional(nvml, nvml.nvmlDeviceGetMigMode, handle)
    if modes is None:
        return None
    current = modes[0] if isinstance(modes, list | tuple) else modes
    return bool(current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))


def _mig_devices(nvml: Any, hostname: str, index: int, handle: Any, parent_uuid: str | None,
                 parent_name: str | None) -> list[GpuSeries]:
    found: list[GpuSeries] = []
    maximum = _optional(nvml, nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    for position in range(int(maximum)):
        mig = _optional(nvml, nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, position)
        if mig is None:
            continue
        name = _text(_optional(nvml, nvml.nvmlDeviceGetName, mig)) or ""
        profile = _MIG_NAME.search(name)
        memory = _optional(nvml, nvml.nvmlDeviceGetMemoryInfo, mig)
        instance = _optional(nvml, nvml.nvmlDeviceGetGpuInstanceId, mig)
        found.append(GpuSeries(
            hostname=hostname, uuid=parent_uuid, gpu=str(index), model=parent_name,
            mig_profile=profile.group(1).lower() if profile else None,
            mig_instance=str(instance) if instance is not None else str(position),
            memory_used_mib=memory.used / _MIB if memory is not None else None,
            memory_total_mib=memory.total / _MIB if memory is not None else None,
            processes=_processes(nvml, mig), source="nvml",
            problem="NVML does not report utilization for MIG devices; use DCGM profiling "
                    "metrics (DCGM_FI_PROF_GR_ENGINE_ACTIVE) for slices",
        ))
    return found


def _processes(nvml: Any, handle: Any) -> list[GpuProcess]:
    running = _optional(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    processes = []
    for process in running:
        used = getattr(process, "usedGpuMemory", None)
        processes.append(GpuProcess(pid=int(process.pid),
                                    used_memory_mib=used / _MIB if used is not None else None))
    return processes


def _optional(nvml: Any, function: Callable[..., Any], *args: Any) -> Any:
    """The function's answer, or None when NVML says not supported / not found / failed."""
    try:
        return function(*args)
    except nvml.NVMLError:
        return None


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value) if value is not None else None
