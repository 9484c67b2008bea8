"""DCGM label rules, folding series into readings, durations, and the snapshot section."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.core.durations import format_duration, parse_duration
from engine.core.errors import InputError
from engine.telemetry.series import (
    SeriesFolder,
    drop_mig_parents,
    series_labels,
)
from engine.telemetry.snapshot import parse_section

GPU = {"gpu": "0", "UUID": "GPU-1", "Hostname": "node-a", "modelName": "NVIDIA L4"}


def test_exported_labels_win_over_the_scrape_targets() -> None:
    labels = series_labels({**GPU, "pod": "dcgm-exporter-x", "namespace": "gpu-operator",
                            "container": "exporter", "exported_pod": "web-0",
                            "exported_namespace": "shop", "exported_container": "app"})
    assert (labels.pod, labels.namespace, labels.container, labels.problem) == \
        ("web-0", "shop", "app", None)


def test_exported_pod_without_its_namespace_is_a_problem() -> None:
    labels = series_labels({**GPU, "pod": "dcgm-exporter-x", "namespace": "gpu-operator",
                            "exported_pod": "web-0"})
    assert labels.pod == "web-0" and labels.namespace is None
    assert labels.problem is not None and "exported_namespace" in labels.problem


def test_hostname_label_spellings_and_mig_labels() -> None:
    labels = series_labels({"gpu": "1", "hostname": "n", "GPU_I_PROFILE": "1g.10gb",
                            "GPU_I_ID": "3"})
    assert (labels.hostname, labels.mig_profile, labels.mig_instance) == ("n", "1g.10gb", "3")
    assert series_labels({"gpu": "1", "Hostname": "A", "hostname": "b"}).hostname == "A"


def test_folding_weights_averages_and_merges_restarted_exporters() -> None:
    folder = SeriesFolder()
    metric = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    folder.add_series(metric, {**GPU, "instance": "10.0.0.1:9400"},
                      {"avg": 0.1, "count": 30.0, "last": 1.0})
    folder.add_series(metric, {**GPU, "instance": "10.0.0.2:9400"},  # after a restart
                      {"avg": 0.4, "count": 90.0, "last": 2.0})
    folder.add_series("DCGM_FI_DEV_FB_USED", GPU, {"max": 2048.0})
    folder.add_series("DCGM_FI_DEV_FB_FREE", GPU, {"min": 20000.0})
    folder.add_series(metric, {"job": "dcgm"}, {"avg": 0.0, "count": 1.0})
    [reading] = folder.readings(window_seconds=3600, source="test", check_stale=True)
    assert reading.activity_pct == pytest.approx(32.5) and reading.samples == 120
    assert (reading.memory_used_mib, reading.memory_total_mib) == (2048.0, 22048.0)
    assert folder.unidentified == 1


def test_util_is_the_fallback_but_not_on_mig_slices() -> None:
    folder = SeriesFolder()
    folder.add_series("DCGM_FI_DEV_GPU_UTIL", GPU, {"avg": 12.0, "count": 4.0, "last": 1.0})
    slice_labels = {**GPU, "GPU_I_PROFILE": "1g.6gb", "GPU_I_ID": "1"}
    folder.add_series("DCGM_FI_DEV_GPU_UTIL", slice_labels, {"avg": 80.0, "count": 4.0,
                                                             "last": 1.0})
    whole, mig = folder.readings(window_seconds=60, source="t", check_stale=True)
    assert (whole.activity_pct, whole.activity_metric) == (12.0, "DCGM_FI_DEV_GPU_UTIL")
    assert mig.activity_pct is None and mig.problem is not None
    assert "not valid on MIG slices" in mig.problem


def test_nan_and_stale_series_are_problems() -> None:
    folder = SeriesFolder()
    metric = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    folder.add_series(metric, GPU, {"avg": math.nan, "count": 10.0, "last": 1.0})
    folder.add_series(metric, {**GPU, "gpu": "1", "UUID": "GPU-2"}, {"avg": 0.5, "count": 10.0})
    nan, stale = folder.readings(window_seconds=60, source="t", check_stale=True)
    assert nan.problem == f"{metric} has NaN samples in the window"
    assert stale.stale and not nan.stale


def test_mig_parents_are_dropped_when_slices_report() -> None:
    folder = SeriesFolder()
    metric = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    folder.add_series(metric, GPU, {"avg": 0.5, "count": 1.0})
    folder.add_series(metric, {**GPU, "GPU_I_ID": "1", "GPU_I_PROFILE": "1g.6gb"},
                      {"avg": 0.5, "count": 1.0})
    folder.add_series(metric, {**GPU, "UUID": "GPU-other"}, {"avg": 0.5, "count": 1.0})
    kept = drop_mig_parents(folder.readings(window_seconds=0, source="t", check_stale=False))
    assert sorted((r.uuid, r.mig_instance) for r in kept) == [("GPU-1", "1"),
                                                              ("GPU-other", None)]


@pytest.mark.parametrize(("text", "seconds"), [
    ("1h", 3600), ("90m", 5400), ("1h30m", 5400), ("2d", 172800), ("45s", 45), ("600", 600),
    (900, 900), (1.5, 1), ("1w", 604800),
])
def test_durations(text: object, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["1 hour", "h", "-5", "1h-", True, None, -1, "1.5.5h"])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(bad)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 60, 3600, 5400, 90061)] == \
        ["0s", "1m", "1h", "1h30m", "1d1h1m1s"]


def test_a_bad_policy_window_is_a_policy_error(tmp_path: Path) -> None:
    from engine.loading.policies import load_policies

    path = tmp_path / "o.yaml"
    path.write_text("apiVersion: gpuwarden.io/v1\noverrides:\n  gpu-idle:\n"
                    "    parameters: {window: an hour}\n")
    with pytest.raises(InputError, match="not a duration"):
        load_policies(["builtin", str(path)])


def test_section_errors_name_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match=r"telemetry\.gpus\.0\.samples"):
        parse_section({"gpus": [{"samples": "many"}]})
    with pytest.raises(InputError, match=r"telemetry\.gpus\.0\.colour: Extra inputs"):
        parse_section({"gpus": [{"colour": "green"}]})
    bundle = tmp_path / "bad.json"
    bundle.write_text(json.dumps({"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot",
                                  "telemetry": {"gpus": "all of them"}}))
    monkeypatch.setattr(sys, "argv", ["gpuwarden", "scan", "--source", f"snapshot:{bundle}"])
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert f"{bundle}: telemetry.gpus: " in err
