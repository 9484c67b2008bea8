"""GPU telemetry from a real Prometheus (tests/prometheus_fixture.py): the engine queries its
HTTP API exactly as in production, over TLS with basic auth, and a scan judges the joined GPUs.

Outages and bad data (Prometheus down, slow, 4xx/5xx, untrusted TLS, NaN and stale samples,
missing labels, pod + exported_pod) each give `unknown` with a reason while the scan goes on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import pytest

from engine.core.catalog import builtin_catalog
from engine.sources.registry import Collected, ScanOptions, collect_sources
from engine.telemetry import attach_telemetry
from engine.telemetry.prometheus import (
    METRIC_STATS,
    PrometheusClient,
    PrometheusSettings,
    fetch_gpu_series,
)
from tests.conftest import run_cli

if TYPE_CHECKING:
    from tests.prometheus_fixture import PrometheusServer

pytest_plugins = ["tests.prometheus_fixture"]

TEAM = {"team": "ml", "project": "p", "cost-center": "cc-1"}


def workload(kind: str, name: str, namespace: str, *, gpus: int = 1,
             product: str | None = "NVIDIA-A100-SXM4-80GB",
             resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x:1", "resources": {
        "limits": {resource: gpus}}}]}
    if product:
        pod_spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    spec: dict[str, Any] = {"template": {"metadata": {"labels": {"app": name}},
                                         "spec": pod_spec}}
    if kind in ("Deployment", "StatefulSet"):
        spec["replicas"] = 1
    if kind == "Job":
        spec["template"]["spec"]["restartPolicy"] = "Never"
        spec["parallelism"] = 1
    return {"apiVersion": "batch/v1" if kind == "Job" else "apps/v1", "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "labels": TEAM}, "spec": spec}


def node(name: str, instance_id: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "node.kubernetes.io/instance-type": "p4de.24xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "karpenter.sh/capacity-type": "on-demand"}},
        "spec": {"providerID": f"aws:///us-east-1a/{instance_id}"}}


def estate() -> dict[str, Any]:
    """The workloads, nodes and instance the fixture's DCGM series belong to."""
    namespaces = [{"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "labels": {"env": "dev"}}}
                  for ns in ("research", "serving", "apps")]
    objects = [
        *namespaces,
        node("node-z", "i-0fedcba9876543210"),
        node("node-d", "i-0d0d0d0d0d0d0d0d0"),
        workload("Deployment", "notebook", "research"),
        workload("Job", "trainer", "research", gpus=2),
        workload("StatefulSet", "infer", "serving", product="NVIDIA-L4"),
        workload("Deployment", "embed", "research", resource="nvidia.com/mig-1g.10gb"),
        workload("Deployment", "legacy", "research", product=None),
        workload("Deployment", "nanny", "research"),
        workload("Deployment", "gone", "research"),
        workload("Deployment", "chat", "serving"),
        workload("StatefulSet", "lonely", "apps"),
    ]
    instance = {
        "provider": "aws", "kind": "aws_instance", "category": "instance",
        "id": "i-0123456789abcdef0", "name": "batch-box", "region": "us-east-1",
        "instance_type": "g5.xlarge", "state": "running", "capacity": "on-demand",
        "tags": {**TEAM, "env": "dev"},
        "raw": {"PrivateDnsName": "ip-10-1-2-3.ec2.internal", "PrivateIpAddress": "10.1.2.3"},
    }
    owners = [
        {"kind": "Pod", "metadata": {
            "name": "notebook-5d8f7b9c4-q2w3e", "namespace": "research",
            "labels": {"pod-template-hash": "5d8f7b9c4"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "notebook-5d8f7b9c4",
                                 "controller": True}]}},
        {"kind": "Pod", "metadata": {
            "name": "lonely-0", "namespace": "apps",
            "ownerReferences": [{"kind": "StatefulSet", "name": "lonely", "controller": True}]}},
    ]
    return {"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot",
            "kubernetes": {"cluster": "lab", "objects": objects},
            "resources": [instance], "telemetry": {"owners": owners}}


@pytest.fixture
def estate_file(tmp_path: Path) -> Path:
    path = tmp_path / "estate.json"
    path.write_text(json.dumps(estate()))
    return path



def findings(report: dict[str, Any], *policies: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(f["policy"], f["resource"]["id"]): f for f in report["findings"]
            if not policies or f["policy"] in policies}


def scan(server: PrometheusServer, estate_file: Path, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[dict[str, Any], str]:
    args = ["scan", "--source", f"snapshot:{estate_file}", *server.cli_args(), "-f", "json",
            "--now", server.end.isoformat(), *extra]
    code, out, err = run_cli(args, capsys, monkeypatch)
    assert code in (0, 1), err
    return json.loads(out), err


# ---------------------------------------------------------------------------- a whole scan


def test_scan_judges_joined_gpus_from_real_prometheus(
    dcgm_prometheus: PrometheusServer, estate_file: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report, err = scan(dcgm_prometheus, estate_file, capsys, monkeypatch)
    found = findings(report, "gpu-idle", "gpu-underutilized")

    idle = found[("gpu-idle", "Deployment/research/notebook")]
    assert idle["result"] == "fail"
    assert 0.5 < idle["details"]["average_activity_pct"] < 1.5
    assert idle["details"]["metric"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert idle["details"]["samples"] == 121 and idle["details"]["window"] == "1:00:00"
    assert idle["estimated_monthly_usd"] > 2400  # an A100 80GB, ~99% idle
    assert idle["remediation"]["action"] == "stop"

    bursty = found[("gpu-underutilized", "StatefulSet/serving/infer")]
    assert bursty["result"] == "fail"
    assert 15 < bursty["details"]["average_activity_pct"] < 18  # 10 busy minutes an hour

    legacy = found[("gpu-idle", "Deployment/research/legacy")]
    assert legacy["details"]["metric"] == "DCGM_FI_DEV_GPU_UTIL"
    assert legacy["estimated_monthly_usd"] > 0  # priced from the model DCGM reported: T4
    assert found[("gpu-idle", "Deployment/serving/chat")]["result"] == "fail"  # exported_pod
    assert found[("gpu-idle", "i-0123456789abcdef0")]["result"] == "fail"  # EC2 DNS name

    for busy in ("Job/research/trainer", "Deployment/research/embed"):
        assert not [key for key in found if key[1] == busy], busy
    assert "1 DCGM series without GPU labels" in err


def test_bad_data_is_unknown_with_its_reason(
    dcgm_prometheus: PrometheusServer, estate_file: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report, _ = scan(dcgm_prometheus, estate_file, capsys, monkeypatch)
    found = findings(report, "gpu-idle")
    reasons = {
        "Deployment/research/nanny": "NaN samples",
        "Deployment/research/gone": "stale series",
        "StatefulSet/apps/lonely": "no exported_namespace",
    }
    for resource_id, reason in reasons.items():
        finding = found[("gpu-idle", resource_id)]
        assert finding["result"] == "unknown", resource_id
        assert reason in finding["message"], finding["message"]
        assert reason in finding["details"]["telemetry_reason"]


def test_unowned_gpus_are_resources_priced_from_their_node(
    dcgm_prometheus: PrometheusServer, estate_file: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report, _ = scan(dcgm_prometheus, estate_file, capsys, monkeypatch)
    unowned = {f["resource"]["id"]: f for f in report["findings"]
               if f["resource"]["kind"] == "unowned_gpu" and f["policy"] == "gpu-idle"}
    whole = unowned["node-z/GPU-2e70000-0000-4000-8000-000000000003"]
    assert whole["result"] == "fail" and whole["resource"]["region"] == "us-east-1"
    assert whole["estimated_monthly_usd"] == pytest.approx(27.44705 / 8 * 730, rel=1e-3)
    mig = unowned["node-d/GPU-3160000-0000-4000-8000-000000000001/mig-2"]
    assert mig["estimated_monthly_usd"] == pytest.approx(27.44705 / 8 * 3 / 7 * 730, rel=1e-3)
    # the MIG parent's own series is not a second GPU; the used slice joined its workload
    assert "node-d/GPU-3160000-0000-4000-8000-000000000001" not in unowned
    assert not [i for i in unowned if i.endswith("/mig-7")]
    assert "gpu-spot-1/GPU-11fe0000-0000-4000-8000-000000000001" in unowned


def test_observed_peak_memory_feeds_the_mig_policy(
    dcgm_prometheus: PrometheusServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle = estate()
    # the notebook's peak (6 GiB) fits 1g.10gb with 20% headroom; the trainer's (69 GiB) not
    path = tmp_path / "estate.json"
    path.write_text(json.dumps(bundle))
    report, _ = scan(dcgm_prometheus, path, capsys, monkeypatch)
    mig = findings(report, "gpu-mig-for-small-jobs")
    notebook = mig[("gpu-mig-for-small-jobs", "Deployment/research/notebook")]
    assert notebook["result"] == "fail"
    assert notebook["details"]["memory_need_gib"] == 6.0
    assert notebook["details"]["mig_resource"] == "nvidia.com/mig-1g.10gb"
    assert ("gpu-mig-for-small-jobs", "Job/research/trainer") not in mig


# ---------------------------------------------------------------------------- queries and window


class CountingClient(PrometheusClient):
    def __init__(self, settings: PrometheusSettings):
        super().__init__(settings)
        self.queries: list[str] = []

    def query(self, promql: str, at: datetime) -> list[dict[str, Any]]:
        self.queries.append(promql)
        return super().query(promql, at)


def settings_of(server: PrometheusServer, **changes: Any) -> PrometheusSettings:
    options = server.options(**changes)
    assert options.prometheus_url is not None
    return PrometheusSettings(options.prometheus_url, options.prometheus_token,
                              options.prometheus_basic_auth, options.prometheus_ca,
                              options.telemetry_timeout_s)


def test_one_query_per_metric_for_every_gpu(dcgm_prometheus: PrometheusServer) -> None:
    client = CountingClient(settings_of(dcgm_prometheus))
    result = fetch_gpu_series(client.settings, 3600, dcgm_prometheus.end, client=client)
    assert len(client.queries) == len(METRIC_STATS) == 6
    assert len({r.gpu_key() for r in result.readings}) >= 14
    assert all("UUID" not in query and "pod" not in query for query in client.queries)


def test_a_window_shorter_than_the_policy_window_is_unknown(
    dcgm_prometheus: PrometheusServer, estate_file: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    report, _ = scan(dcgm_prometheus, estate_file, capsys, monkeypatch,
                     "--telemetry-window", "600")
    idle = findings(report, "gpu-idle")[("gpu-idle", "Deployment/research/notebook")]
    assert idle["result"] == "unknown"
    assert "covers 10m, less than the policy's 1h window" in idle["message"]
    override = tmp_path / "window.yaml"
    override.write_text("apiVersion: gpuwarden.io/v1\noverrides:\n  gpu-idle:\n"
                        "    parameters: {window: 10m}\n")
    report, _ = scan(dcgm_prometheus, estate_file, capsys, monkeypatch,
                     "--telemetry-window", "600", "--policies", "builtin",
                     "--policies", str(override))
    idle = findings(report, "gpu-idle")[("gpu-idle", "Deployment/research/notebook")]
    assert idle["result"] == "fail" and idle["details"]["samples"] == 21


def test_reference_exporter_output_scraped_by_prometheus(dcgm_prometheus: PrometheusServer
                                                         ) -> None:
    """The real dcgm-exporter text, scraped with the exporter pod's target labels."""
    dcgm_prometheus.wait_for_scrapes()
    result = fetch_gpu_series(settings_of(dcgm_prometheus), 60, datetime.now(UTC))
    by_uuid = {(r.uuid, r.mig_profile): r for r in result.readings}
    t4 = by_uuid[("GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", None)]
    assert t4.activity_metric == "DCGM_FI_DEV_GPU_UTIL" and t4.activity_pct == 0.0
    assert t4.model == "Tesla T4" and t4.memory_total_mib == 15109.0
    assert t4.pod == "dcgm-exporter-x2x7q"  # the target's pod label: not a GPU workload
    mig = by_uuid[("GPU-34319582-d595-d1c7-d1d2-179bcfa61660", "1g.5gb")]
    assert mig.mig_instance == "13" and mig.activity_pct == pytest.approx(99.5687)
    assert ("GPU-34319582-d595-d1c7-d1d2-179bcfa61660", None) not in by_uuid  # MIG parent
    assert any("without GPU labels" in w for w in result.warnings)  # the dummy samples


def test_scraped_gpus_without_owner_are_unknown_under_a_short_window(
    dcgm_prometheus: PrometheusServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dcgm_prometheus.wait_for_scrapes()
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot"}))
    args = ["scan", "--source", f"snapshot:{empty}", *dcgm_prometheus.cli_args(), "-f", "json",
            "--telemetry-window", "60", "--now", datetime.now(UTC).isoformat()]
    code, out, _ = run_cli(args, capsys, monkeypatch)
    report = json.loads(out)
    idle = {f["resource"]["id"]: f for f in report["findings"] if f["policy"] == "gpu-idle"}
    t4 = idle["424773df46e0/GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"]
    assert t4["result"] == "unknown" and "covers 1m" in t4["message"]
    tags = {f["resource"]["id"]: f for f in report["findings"]
            if f["policy"] == "required-cost-tags"}
    assert tags["424773df46e0/GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"]["result"] == "fail"
    # missing tags are audited at runtime, not denied; the clock is the real one (Prometheus
    # holds live samples), so in the evening the off-hours policy may fail and gate the run
    off_hours = any(f["policy"] == "gpu-off-hours-shutdown" and f["result"] == "fail"
                    for f in report["findings"])
    assert code == (1 if off_hours else 0)


# ---------------------------------------------------------------------------- outages


def attach(options: ScanOptions, estate_path: Path, now: datetime) -> Collected:
    catalog = builtin_catalog()
    collected = collect_sources([f"snapshot:{estate_path}"], options, catalog)
    return attach_telemetry(collected, options, now, catalog)


def telemetry_of(collected: Collected, resource_id: str) -> Any:
    return next(r for r in collected.resources if r.id == resource_id).telemetry


def test_prometheus_down_leaves_gpus_unknown_and_the_scan_going(
    estate_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.prometheus_fixture import free_port

    args = ["scan", "--source", f"snapshot:{estate_file}", "--prometheus-url",
            f"http://127.0.0.1:{free_port()}", "-f", "json", "--now", "2026-12-01T12:00:00Z"]
    code, out, err = run_cli(args, capsys, monkeypatch)
    report = json.loads(out)
    idle = findings(report, "gpu-idle")[("gpu-idle", "Deployment/research/notebook")]
    assert idle["result"] == "unknown"
    assert "unreachable" in idle["message"] and "refused" in idle["message"].lower()
    assert "gpuwarden: warning: telemetry: Prometheus at" in err
    assert report["summary"]["resources"] == 9 + 1  # workloads + instance: no unowned GPU
    assert code == 0


class FakePrometheus:
    """A loopback HTTP server answering /api/v1/query with a chosen status, body and delay."""

    def __init__(self, status: int = 200, body: bytes = b"", delay: float = 0.0,
                 content_type: str = "application/json"):
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                fake.requests.append({"path": self.path, "form": form,
                                      "authorization": self.headers.get("Authorization")})
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting: that is the point of a slow server

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/prom"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_prometheus() -> Iterator[Any]:
    made: list[FakePrometheus] = []

    def make(**kwargs: Any) -> FakePrometheus:
        made.append(FakePrometheus(**kwargs))
        return made[-1]

    yield make
    for fake in made:
        fake.close()


NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(("status", "body", "content_type", "reason"), [
    (400, b'{"status":"error","errorType":"bad_data","error":"1:1: parse error: unexpected"}',
     "application/json", "HTTP 400 Bad Request: bad_data: 1:1: parse error"),
    (503, b"<html>upstream connect error</html>", "text/html",
     "HTTP 503 Service Unavailable"),
    (200, b"<html>a login page</html>", "text/html", "not Prometheus API JSON"),
    (200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
     "application/json", "not an instant vector"),
])
def test_http_errors_give_unknown_with_the_reason(
    fake_prometheus: Any, estate_file: Path, status: int, body: bytes, content_type: str,
    reason: str,
) -> None:
    fake = fake_prometheus(status=status, body=body, content_type=content_type)
    collected = attach(ScanOptions(prometheus_url=fake.url), estate_file, NOW)
    telemetry = telemetry_of(collected, "Deployment/research/notebook")
    assert telemetry.average_activity_pct is None and reason in telemetry.reason
    assert any(reason in warning for warning in collected.warnings)
    assert {r["path"] for r in fake.requests} == {"/prom/api/v1/query"}


def test_a_slow_prometheus_is_cut_off_by_the_timeout_budget(fake_prometheus: Any,
                                                             estate_file: Path) -> None:
    fake = fake_prometheus(delay=3.0, body=b'{"status":"success"}')
    started = time.monotonic()
    collected = attach(ScanOptions(prometheus_url=fake.url, telemetry_timeout_s=0.5),
                       estate_file, NOW)
    assert time.monotonic() - started < 2.5  # the six queries share the 0.5 s budget
    reason = telemetry_of(collected, "Deployment/research/notebook").reason
    assert "did not answer within the 0.5s telemetry timeout" in reason


def test_bearer_token_and_query_form(fake_prometheus: Any, estate_file: Path) -> None:
    body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    fake = fake_prometheus(body=body)
    attach(ScanOptions(prometheus_url=fake.url, prometheus_token="t0k3n",
                       telemetry_window_s=1800), estate_file, NOW)
    assert {r["authorization"] for r in fake.requests} == {"Bearer t0k3n"}
    queries = [r["form"]["query"][0] for r in fake.requests]
    assert len(queries) == 6 and all("[1800s]" in q for q in queries if "over_time" in q)
    assert {r["form"]["time"][0] for r in fake.requests} == {f"{NOW.timestamp():.3f}"}


def test_wrong_credentials_and_untrusted_tls_are_reasons(dcgm_prometheus: PrometheusServer,
                                                         estate_file: Path) -> None:
    if dcgm_prometheus.basic_auth is None:
        pytest.skip("no bcrypt in this libcrypt: Prometheus runs without basic auth")
    wrong = attach(dcgm_prometheus.options(prometheus_basic_auth="gpuwarden:nope"),
                   estate_file, dcgm_prometheus.end)
    assert "HTTP 401" in telemetry_of(wrong, "Deployment/research/notebook").reason
    untrusted = attach(dcgm_prometheus.options(prometheus_ca=None), estate_file,
                       dcgm_prometheus.end)
    assert "TLS certificate not trusted" in \
        telemetry_of(untrusted, "Deployment/research/notebook").reason


@pytest.mark.parametrize(("args", "message"), [
    (["--prometheus-token", "t", "--prometheus-basic-auth", "u:p"], "not both"),
    (["--prometheus-basic-auth", "nocolon"], "user:password"),
    (["--prometheus-ca", "/nonexistent/ca.pem"], "CA bundle not found"),
])
def test_bad_prometheus_options_exit_2_with_one_line(
    estate_file: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, _, err = run_cli(["scan", "--source", f"snapshot:{estate_file}", "--prometheus-url",
                            "http://127.0.0.1:9", *args], capsys, monkeypatch)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_non_http_url_exits_2(estate_file: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run_cli(["scan", "--source", f"snapshot:{estate_file}", "--prometheus-url",
                            "prometheus:9090"], capsys, monkeypatch)
    assert code == 2 and "not an http(s) URL" in err


# ---------------------------------------------------------------------------- saved and replayed


def test_a_saved_scan_replays_the_same_verdicts_offline(
    dcgm_prometheus: PrometheusServer, estate_file: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved = tmp_path / "saved.json"
    live, _ = scan(dcgm_prometheus, estate_file, capsys, monkeypatch, "--save-snapshot",
                   str(saved))
    section = json.loads(saved.read_text())["telemetry"]
    assert section["window_seconds"] == 3600 and len(section["gpus"]) >= 14
    args = ["scan", "--source", f"snapshot:{saved}", "-f", "json", "--now",
            dcgm_prometheus.end.isoformat()]
    _, out, _ = run_cli(args, capsys, monkeypatch)
    assert json.loads(out)["findings"] == live["findings"]
