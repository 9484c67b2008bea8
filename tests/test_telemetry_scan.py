"""Telemetry in whole scans: the demo estate's GPU findings, replay from a saved scan,
`gpuwarden telemetry show`, and a live cluster whose idle GPU is scaled to zero in enforce mode
(the fake Kubernetes API of test_kubernetes_live and the real Prometheus fixture)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from engine.cli import main
from engine.demo import demo_policy_paths
from tests.conftest import run_cli
from tests.test_kubernetes_live import FakeApi, make_handler
from tests.test_kubernetes_live import estate as cluster_estate

if TYPE_CHECKING:
    from tests.prometheus_fixture import PrometheusServer

pytest_plugins = ["tests.prometheus_fixture"]
BUSINESS_HOURS = "2026-12-01T12:00:00Z"



def by_policy(report: dict[str, Any], policy: str) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"]: f for f in report["findings"] if f["policy"] == policy}


@pytest.fixture(scope="module")
def demo_report() -> dict[str, Any]:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["gpuwarden", "scan", "--demo", "-f", "json", "--now", BUSINESS_HOURS]
    try:
        with redirect_stdout(out), redirect_stderr(err), pytest.raises(SystemExit):
            main()
    finally:
        sys.argv = argv
    assert err.getvalue() == ""  # the demo's telemetry joins without a single warning
    report: dict[str, Any] = json.loads(out.getvalue())
    return report


def test_demo_idle_notebook_is_found_and_priced(demo_report: dict[str, Any]) -> None:
    idle = by_policy(demo_report, "gpu-idle")["Deployment/research/jupyter-a100"]
    assert idle["result"] == "fail"
    assert idle["details"] == {"average_activity_pct": 0.8, "samples": 240,
                               "window": "1:00:00", "threshold_pct": 5.0,
                               "metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                               # the spend the saving is a share of (docs/costs.md)
                               "resource_monthly_spend_usd": pytest.approx(27.44705 / 8 * 730,
                                                                           abs=0.01)}
    # one A100 80GB at its catalog rate for 730 h, 99.2% of it idle
    assert idle["estimated_monthly_usd"] == pytest.approx(27.44705 / 8 * 730 * 0.992, abs=0.01)
    assert idle["remediation"] == {"action": "stop", "status": "planned", "detail":
                                   "would scale Deployment/research/jupyter-a100 to zero "
                                   "(previous size 1 recorded)"}


def test_demo_serving_is_underutilized_and_training_is_busy(demo_report: dict[str, Any]
                                                            ) -> None:
    under = by_policy(demo_report, "gpu-underutilized")
    serving = under["StatefulSet/serving/llm-serving"]
    assert serving["result"] == "fail" and serving["details"]["average_activity_pct"] == 22.35
    assert serving["remediation"] is None  # production: advice only
    training = "Job/research/train-llama-ft"
    for policy in ("gpu-idle", "gpu-underutilized", "gpu-mig-for-small-jobs"):
        assert training not in by_policy(demo_report, policy), policy  # 92% busy, 70 GiB


def test_demo_reports_the_unowned_mig_slice(demo_report: dict[str, Any]) -> None:
    slice_id = "ip-10-0-3-41.ec2.internal/GPU-9b04d6e1-27a5-4c83-b1f9-6e2d8a4c7f30/mig-2"
    idle = by_policy(demo_report, "gpu-idle")[slice_id]
    assert idle["resource"]["kind"] == "unowned_gpu" and idle["result"] == "fail"
    assert idle["resource"]["region"] == "us-east-1"  # from its node
    # 3 of 7 compute slices of a p4de.24xlarge GPU
    assert idle["estimated_monthly_usd"] == pytest.approx(27.44705 / 8 * 3 / 7 * 730, abs=0.01)
    assert by_policy(demo_report, "required-cost-tags")[slice_id]["result"] == "fail"


def test_demo_gpus_without_telemetry_stay_unknown(demo_report: dict[str, Any]) -> None:
    nightly = by_policy(demo_report, "gpu-idle")["CronJob/research/nightly-eval"]
    assert nightly["result"] == "unknown"
    assert nightly["message"].endswith("no GPU telemetry for it")


def test_demo_scan_saved_and_replayed_gives_the_same_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    demo_report: dict[str, Any],
) -> None:
    saved = tmp_path / "saved.json"
    run_cli(["scan", "--demo", "--now", BUSINESS_HOURS, "--save-snapshot", str(saved)],
            capsys, monkeypatch)
    policies = [arg for path in demo_policy_paths() for arg in ("--policies", path)]
    _, out, _ = run_cli(["scan", "--source", f"snapshot:{saved}", *policies, "-f", "json", "--now",
                         BUSINESS_HOURS], capsys, monkeypatch)
    assert json.loads(out)["findings"] == demo_report["findings"]


def test_telemetry_show_lists_each_reading_and_its_join(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, _ = run_cli(["telemetry", "show", "--demo"], capsys, monkeypatch)
    assert code == 0
    rows = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines()[1:]}
    assert rows["ip-10-0-3-41.ec2.internal #0"].endswith("Deployment/research/jupyter-a100")
    assert rows["ip-10-0-3-41.ec2.internal #1"].endswith("(no owner)")
    assert len(rows) == 12
    code, out, _ = run_cli(["telemetry", "show", "--demo", "-f", "json"], capsys, monkeypatch)
    joined = {g["reading"]["uuid"]: g["joined_to"] for g in json.loads(out)["gpus"]}
    assert joined["GPU-a7e3c915-4d2b-4f86-8c0e-3b5f9d1a2e47"] == ["StatefulSet/serving/llm-serving"]
    code, _, err = run_cli(["telemetry", "show"], capsys, monkeypatch)
    assert code == 2 and "no telemetry to show" in err


# ---------------------------------------------------------------------------- a live cluster


@pytest.fixture
def live_cluster(tmp_path: Path) -> Iterator[tuple[FakeApi, Path]]:
    api = FakeApi(cluster_estate())
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(api))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {
            "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "auditor", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "auditor"}}],
    }))
    try:
        yield api, kubeconfig
    finally:
        server.shutdown()
        server.server_close()


def test_live_idle_gpu_is_scaled_to_zero_in_enforce_mode(
    dcgm_prometheus: PrometheusServer, live_cluster: tuple[FakeApi, Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DCGM names pod trainer-a-7d9-x1, which the cluster listing leaves out (its Deployment
    stands for it): the pods are listed to follow Pod → ReplicaSet → Deployment."""
    api, kubeconfig = live_cluster
    only_idle = tmp_path / "only-idle.yaml"
    only_idle.write_text("apiVersion: gpuwarden.io/v1\noverrides:\n"
                         "  gpu-off-hours-shutdown: {disabled: true}\n")
    audit = tmp_path / "audit.jsonl"
    code, out, _ = run_cli(
        ["scan", "--source", "k8s", "--kubeconfig", str(kubeconfig), *dcgm_prometheus.cli_args(),
         "--now", dcgm_prometheus.end.isoformat(), "--policies", "builtin", "--policies",
         str(only_idle), "--enforce", "--audit-log", str(audit), "-f", "json"],
        capsys, monkeypatch)
    report = json.loads(out)
    idle = by_policy(report, "gpu-idle")["Deployment/ml/trainer-a"]
    assert idle["result"] == "fail" and idle["details"]["average_activity_pct"] == 2.0
    assert idle["remediation"]["status"] == "applied"
    patches = {r.path: r.body for r in api.mutations()}
    assert patches["/apis/apps/v1/namespaces/ml/deployments/trainer-a"]["spec"] == \
        {"replicas": 0}
    assert [r.path for r in api.requests].count("/api/v1/pods") == 2  # listing + owners
    assert code == 1
