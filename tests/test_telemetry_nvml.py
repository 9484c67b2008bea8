"""NVML through the adapter: an injected fake in place of the driver, and the real `pynvml`
on this machine, which has no NVIDIA driver ("no NVML", one line, exit 0)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from engine.telemetry.nvml import read_nvml
from tests.conftest import run_cli

GIB = 1024**3


@dataclass
class FakeDevice:
    name: str
    uuid: str
    utilization: list[int] | None  # one value per read; None: not supported
    used: int
    total: int
    mig: bool | None = None  # None: MIG not supported
    slices: list[FakeDevice] = field(default_factory=list)
    instance: int = 0
    pids: list[tuple[int, int | None]] = field(default_factory=list)
    power_mw: int | None = 70000


class FakeNvml:
    """The part of pynvml's API the adapter uses, answering from `devices`."""

    NVMLError = pynvml.NVMLError
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE

    def __init__(self, devices: list[FakeDevice], init_error: int | None = None):
        self.devices = devices
        self.init_error = init_error
        self.reads: dict[str, int] = {}
        self.shutdown = False

    @staticmethod
    def _unsupported() -> pynvml.NVMLError:
        return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.127.05"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        return self.devices[index]

    def nvmlDeviceGetName(self, device: FakeDevice) -> str:
        return device.name

    def nvmlDeviceGetUUID(self, device: FakeDevice) -> str:
        return device.uuid

    def nvmlDeviceGetUtilizationRates(self, device: FakeDevice) -> Any:
        if device.utilization is None:
            raise self._unsupported()
        count = self.reads.get(device.uuid, 0)
        self.reads[device.uuid] = count + 1
        return SimpleNamespace(gpu=device.utilization[count % len(device.utilization)],
                               memory=0)

    def nvmlDeviceGetMemoryInfo(self, device: FakeDevice) -> Any:
        return SimpleNamespace(used=device.used, total=device.total, free=device.total -
                               device.used)

    def nvmlDeviceGetMigMode(self, device: FakeDevice) -> list[int]:
        if device.mig is None:
            raise self._unsupported()
        return [int(device.mig), int(device.mig)]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: FakeDevice) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeDevice, index: int) -> FakeDevice:
        if index >= len(device.slices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return device.slices[index]

    def nvmlDeviceGetGpuInstanceId(self, device: FakeDevice) -> int:
        return device.instance

    def nvmlDeviceGetComputeRunningProcesses(self, device: FakeDevice) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in device.pids]

    def nvmlDeviceGetPowerUsage(self, device: FakeDevice) -> int:
        if device.power_mw is None:
            raise self._unsupported()
        return device.power_mw


def estate() -> list[FakeDevice]:
    slices = [
        FakeDevice("NVIDIA H200 MIG 1g.18gb", "MIG-a", None, 2 * GIB, 18 * GIB, instance=9,
                   pids=[(4242, 2 * GIB)]),
        FakeDevice("NVIDIA H200 MIG 3g.71gb", "MIG-b", None, 0, 71 * GIB, instance=2),
    ]
    return [
        FakeDevice("NVIDIA L4", "GPU-l4", [10, 30], 4 * GIB, 24 * GIB, mig=None,
                   pids=[(100, GIB), (101, None)]),
        FakeDevice("NVIDIA H200", "GPU-h200", None, 2 * GIB, 141 * GIB, mig=True,
                   slices=slices, power_mw=None),
    ]


def test_reads_gpus_mig_devices_processes_and_power() -> None:
    fake = FakeNvml(estate())
    result = read_nvml(nvml=fake, hostname="gpu-node-1")
    assert fake.shutdown and result.error is None and result.driver_version == "550.127.05"
    l4, h200, slice_a, slice_b = result.readings
    assert (l4.activity_pct, l4.activity_metric, l4.samples, l4.window_seconds) == \
        (10.0, "nvml.utilization.gpu", 1, 0)
    assert (l4.memory_used_mib, l4.memory_total_mib, l4.power_w) == (4096.0, 24576.0, 70.0)
    assert [(p.pid, p.used_memory_mib) for p in l4.processes] == [(100, 1024.0), (101, None)]
    assert (l4.hostname, l4.gpu, l4.uuid, l4.mig_mode) == ("gpu-node-1", "0", "GPU-l4", None)
    assert h200.mig_mode is True and h200.activity_pct is None and h200.power_w is None
    assert (slice_a.uuid, slice_a.mig_profile, slice_a.mig_instance) == ("GPU-h200", "1g.18gb",
                                                                         "9")
    assert slice_a.processes[0].pid == 4242 and slice_b.mig_profile == "3g.71gb"
    assert slice_a.problem is not None and "MIG devices" in slice_a.problem


def test_sampling_over_a_duration_averages() -> None:
    fake = FakeNvml(estate())
    slept: list[float] = []
    result = read_nvml(nvml=fake, hostname="n", duration_s=4, interval_s=1,
                       sleep=slept.append)
    l4 = result.readings[0]
    assert slept == [1, 1, 1, 1] and l4.samples == 5 and l4.window_seconds == 4
    assert l4.activity_pct == pytest.approx((10 + 30 + 10 + 30 + 10) / 5)


def test_no_driver_is_one_reason_not_an_exception() -> None:
    result = read_nvml(nvml=FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert result.readings == [] and result.error == \
        "no NVML: Driver Not Loaded (no NVIDIA driver on this machine?)"



def real_nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(real_nvml_works(), reason="this machine has an NVIDIA driver")
def test_cli_without_a_driver_prints_one_line_and_exits_0(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = run_cli(["telemetry", "nvml"], capsys, monkeypatch)
    assert (code, err) == (0, "")
    assert out.startswith("gpuwarden: no NVML: ") and out.count("\n") == 1
    code, out, _ = run_cli(["telemetry", "nvml", "-f", "json"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["gpus"] == []


def test_cli_table_json_and_saved_snapshot_with_the_fake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(estate()))
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    saved = tmp_path / "nvml.json"
    code, out, _ = run_cli(["telemetry", "nvml", "--save", str(saved), "--now",
                            "2026-12-01T12:00:00Z"], capsys, monkeypatch)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["GPU", "MODEL", "UUID", "UTIL", "MEMORY", "MIG", "POWER", "PIDS"]
    assert lines[1].split()[:5] == ["gpu-node-1", "#0", "NVIDIA", "L4", "GPU-l4"]
    assert "gpu-node-1 #1 1g.18gb/9" in out
    code, out, _ = run_cli(["telemetry", "nvml", "-f", "json"], capsys, monkeypatch)
    assert [g["uuid"] for g in json.loads(out)["gpus"]] == ["GPU-l4"] + ["GPU-h200"] * 3
    # the saved readings are a snapshot a scan joins: here to no resource, so unowned GPUs
    bundle = json.loads(saved.read_text())
    assert bundle["kind"] == "Snapshot" and bundle["telemetry"]["source"] == "nvml"
    code, out, _ = run_cli(["scan", "--source", f"snapshot:{saved}", "-f", "json", "--now",
                            "2026-12-01T12:00:00Z"], capsys, monkeypatch)
    ids = {f["resource"]["id"] for f in json.loads(out)["findings"]}
    assert {"gpu-node-1/GPU-l4", "gpu-node-1/GPU-h200/mig-9", "gpu-node-1/GPU-h200/mig-2"} \
        <= ids
    assert "gpu-node-1/GPU-h200" not in ids  # the MIG parent: its slices stand for it
