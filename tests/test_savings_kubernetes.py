"""`gpuwarden savings` over a Kubernetes audit log, through the real client against the loopback
API server of tests/test_kubernetes_live.py: enforcement at 22:00 UTC on a weekday scales the
non-production GPU Deployment and StatefulSet to zero, enforcement at 08:00 the next weekday
scales them back; each saved 10 hours × its spend per hour (replicas × GPUs × the catalog's
$/GPU-h), totalled by policy and team."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.core.catalog import builtin_catalog
from tests import test_kubernetes_live as live
from tests.test_kubernetes_live import FakeApi, audit_lines, run_cli
from tests.test_resume_kubernetes import EVENING, MORNING, scan

fake_api = live.fake_api
kubeconfig = live.kubeconfig

A100 = "NVIDIA-A100-SXM4-80GB"
WORKLOADS = {"Deployment/ml/trainer-a": 3, "StatefulSet/ml/notebook": 1}  # id → replicas


def pin_to_a100(api: FakeApi) -> None:
    """Both workloads select the A100 nodes, so the catalog prices their GPUs."""
    for kind, name in (("Deployment", "trainer-a"), ("StatefulSet", "notebook")):
        found = api.find(kind, "ml", name)
        assert found is not None
        found["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": A100}


def savings(audit: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            *extra: str) -> tuple[int, str]:
    code, out, err = run_cli(["savings", "--audit-log", str(audit), *extra], capsys,
                             monkeypatch)
    assert not err
    return code, out


def test_scale_down_at_night_and_back_in_the_morning_saves_hours_times_rate(
    fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    pin_to_a100(api)
    audit = tmp_path / "audit.jsonl"
    scan(kubeconfig, EVENING, capsys, monkeypatch, "--enforce", "--audit-log", str(audit))
    scan(kubeconfig, MORNING, capsys, monkeypatch, "--enforce", "--audit-log", str(audit))
    code, out = savings(audit, capsys, monkeypatch, "--format", "json",
                        "--until", "2026-12-05T00:00:00Z")
    assert code == 0
    ledger = json.loads(out)

    per_gpu = builtin_catalog().gpu_hourly(A100)
    assert per_gpu
    by_resource = {a["resource"]: a for a in ledger["actions"]}
    for workload_id, replicas in WORKLOADS.items():
        action = by_resource.pop(workload_id)
        assert action["stopped_at"] == "2026-12-01T22:00:00+00:00"
        assert action["until"] == "2026-12-02T08:00:00+00:00" and action["hours"] == 10.0
        assert action["usd_per_h"] == pytest.approx(replicas * per_gpu)
        assert action["usd"] == round(10 * action["usd_per_h"], 2)
        assert action["policy"] == "gpu-off-hours-shutdown" and action["team"] == "ml"
    # the CronJob was suspended, not resumed yet: open until --until, at its own rate
    assert all(a["until"] == "2026-12-05T00:00:00+00:00" for a in by_resource.values())
    stopped_overnight = sum(a["usd"] for a in ledger["actions"] if a["resource"] in WORKLOADS)
    assert stopped_overnight == pytest.approx(10 * 4 * per_gpu, abs=0.02)
    assert ledger["total_usd"] == pytest.approx(sum(a["usd"] for a in ledger["actions"]))
    assert ledger["by_policy"] == {"gpu-off-hours-shutdown": pytest.approx(ledger["total_usd"])}
    assert ledger["by_team"] == {"ml": pytest.approx(ledger["total_usd"])}

    code, out = savings(audit, capsys, monkeypatch, "--until", "2026-12-05T00:00:00Z")
    assert code == 0 and out.splitlines()[-1].split()[-1] == f"{ledger['total_usd']:.2f}"


def test_the_audit_rate_names_its_basis_and_the_resume_is_paired(
    fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    pin_to_a100(api)
    audit = tmp_path / "audit.jsonl"
    scan(kubeconfig, EVENING, capsys, monkeypatch, "--enforce", "--audit-log", str(audit))
    scan(kubeconfig, MORNING, capsys, monkeypatch, "--enforce", "--audit-log", str(audit))
    applied = [line for line in audit_lines(audit)
               if line["phase"] == "after" and line["result"] == "applied"
               and line["resource"] == "Deployment/ml/trainer-a"]
    assert [line["action"] for line in applied] == ["stop", "resume"]
    stop, resume = (line["rate"] for line in applied)
    assert stop["replicas"] == resume["replicas"] == 3
    assert stop["at"] == "2026-12-01T22:00:00+00:00"
    assert resume["at"] == "2026-12-02T08:00:00+00:00"
    assert "A100" in stop["source"] and stop["source"].endswith("/h × 3")
    assert stop["team"] == "ml"

    # without the resume line the stop stays open until --until
    audit.write_text("".join(json.dumps(line) + "\n" for line in audit_lines(audit)
                             if line["action"] != "resume"))
    code, out = savings(audit, capsys, monkeypatch, "--format", "json",
                        "--until", "2026-12-02T12:00:00Z")
    trainer = next(a for a in json.loads(out)["actions"]
                   if a["resource"] == "Deployment/ml/trainer-a")
    assert code == 0 and trainer["hours"] == 14.0
