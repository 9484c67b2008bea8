"""A real Prometheus for the telemetry tests (Debian's `prometheus` and `promtool` binaries).

The session fixture `dcgm_prometheus`:

- generates hours of DCGM series as OpenMetrics text (idle, busy, bursty, MIG, GPU_UTIL-only,
  NaN, stale, exporter-relabelled, unowned and unlabelled GPUs; `SCENARIOS`) over a window
  ending at `end`, a fixed instant ten minutes before the fixture started, and loads them with
  `promtool tsdb create-blocks-from openmetrics`;
- starts `prometheus` on an ephemeral loopback port with that data directory, TLS (a `trustme`
  CA) and basic auth, exactly as a production Prometheus is queried;
- has it scrape a loopback HTTP server serving the real dcgm-exporter output in
  `tests/data/reference/dcgm/` every second (`wait_for_scrapes` before querying those).

Tests skip when the binaries are missing (CI installs them: `.ci/run`).
"""

from __future__ import annotations

import math
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.sources.registry import ScanOptions
from tests.conftest import REFERENCE

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
requires_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="Debian's prometheus package is not installed (apt-get install prometheus)",
)

STEP_S = 30
SPAN_S = 3 * 3600
USER, PASSWORD = "gpuwarden", "s3cret-scrape"
REFERENCE_DCGM = REFERENCE / "dcgm"
REFERENCE_FILES = ("datadog-dcgm-metrics.txt", "nvidia-docs-a100-mig-sample.txt")

ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"

Value = Callable[[int, int], float | None]  # (timestamp, end) -> sample, None: no sample


def constant(value: float) -> Value:
    return lambda t, end: value


def wobble(center: float, spread: float) -> Value:
    """A deterministic wiggle around `center`, so averages are not trivially the last value."""
    return lambda t, end: max(0.0, center + spread * math.sin(t / 137.0))


def bursty(t: int, end: int) -> float:
    """Full activity for the first 10 minutes of every hour before `end`: 1/6 on average."""
    return 1.0 if (end - t) % 3600 >= 3000 else 0.0


def until(minutes_before_end: int, value: Value) -> Value:
    return lambda t, end: value(t, end) if t <= end - minutes_before_end * 60 else None


def with_nan(t: int, end: int) -> float:
    return math.nan if (end - t) % 600 == 0 else 0.4


@dataclass(frozen=True)
class Scenario:
    """One GPU (or slice) series set: its labels and a value function per metric."""

    name: str
    labels: dict[str, str]
    metrics: dict[str, Value]


def gpu(host: str, index: str, uuid: str, model: str, **extra: str) -> dict[str, str]:
    return {"gpu": index, "UUID": uuid, "device": f"nvidia{index}", "modelName": model,
            "Hostname": host, **extra}


A100 = "NVIDIA A100-SXM4-80GB"


def memory(used: float, total: float = 81920.0) -> dict[str, Value]:
    return {FB_USED: constant(used), FB_FREE: constant(total - used)}


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("idle", gpu("node-a", "0", "GPU-1d1e0000-0000-4000-8000-000000000001", A100,
                         pod="notebook-5d8f7b9c4-q2w3e", namespace="research", container="lab"),
             {ENGINE: wobble(0.01, 0.005), TENSOR: constant(0.0), **memory(6144)}),
    *(Scenario(f"busy-{i}", gpu("node-b", str(i), f"GPU-b0550000-0000-4000-8000-00000000000{i}",
                                A100, pod="trainer-x8k2m", namespace="research",
                                container="train"),
               {ENGINE: wobble(0.9, 0.05), TENSOR: constant(0.7), **memory(70000 + i * 512)})
      for i in range(2)),
    Scenario("bursty", gpu("node-c", "0", "GPU-b0257000-0000-4000-8000-000000000001", "NVIDIA L4",
                           pod="infer-0", namespace="serving", container="server"),
             {ENGINE: bursty, **memory(12000, 23034)}),
    # A MIG-partitioned A100: the parent's own series (dropped: the slices stand for it), a
    # slice used by a pod, an unused slice, and GPU_UTIL on slices (not valid there: ignored)
    Scenario("mig-parent", gpu("node-d", "0", "GPU-3160000-0000-4000-8000-000000000001", A100),
             {ENGINE: constant(0.5), UTIL: constant(50.0)}),
    Scenario("mig-used", gpu("node-d", "0", "GPU-3160000-0000-4000-8000-000000000001", A100,
                             GPU_I_PROFILE="1g.10gb", GPU_I_ID="7", pod="embed-7c5d9-abcde",
                             namespace="research", container="embed"),
             {ENGINE: constant(0.6), UTIL: constant(50.0), **memory(7000, 9984)}),
    Scenario("mig-free", gpu("node-d", "0", "GPU-3160000-0000-4000-8000-000000000001", A100,
                             GPU_I_PROFILE="3g.40gb", GPU_I_ID="2"),
             {ENGINE: constant(0.0), UTIL: constant(50.0), **memory(0, 40192)}),
    Scenario("util-only", gpu("node-e", "0", "GPU-0e110000-0000-4000-8000-000000000001",
                              "Tesla T4", pod="legacy-6b7c8-zzzzz", namespace="research",
                              container="app"),
             {UTIL: wobble(3.0, 1.0), **memory(900, 15360)}),
    Scenario("nan", gpu("node-f", "0", "GPU-0a0a0000-0000-4000-8000-000000000001", A100,
                        pod="nanny-5f6g7-aaaaa", namespace="research", container="app"),
             {ENGINE: with_nan, **memory(2048)}),
    Scenario("stale", gpu("node-g", "0", "GPU-57a1e000-0000-4000-8000-000000000001", A100,
                          pod="gone-5f6g7-bbbbb", namespace="research", container="app"),
             {ENGINE: until(30, constant(0.5)), FB_USED: until(30, constant(100.0))}),
    Scenario("exported", gpu("node-h", "0", "GPU-e0000000-0000-4000-8000-000000000001", A100,
                             pod="dcgm-exporter-h7k2p", namespace="gpu-operator",
                             exported_pod="chat-6d5f8-k9j8h", exported_namespace="serving",
                             exported_container="app"),
             {ENGINE: constant(0.02), **memory(4096)}),
    Scenario("ambiguous", gpu("node-h", "1", "GPU-e0000000-0000-4000-8000-000000000002", A100,
                              pod="dcgm-exporter-h7k2p", namespace="gpu-operator",
                              exported_pod="lonely-0"),
             {ENGINE: constant(0.02), **memory(4096)}),
    Scenario("unowned", gpu("node-z", "3", "GPU-2e70000-0000-4000-8000-000000000003", A100),
             {ENGINE: constant(0.0), **memory(0)}),
    Scenario("ec2-host", gpu("ip-10-1-2-3.ec2.internal", "0",
                             "GPU-ec200000-0000-4000-8000-000000000001", "NVIDIA A10G"),
             {ENGINE: constant(0.03), **memory(1024, 23028)}),
    # the live-cluster estate of tests/test_kubernetes_live.py: a Deployment's pod, not listed
    Scenario("k8s-live", gpu("gpu-spot-1", "0", "GPU-11fe0000-0000-4000-8000-000000000001",
                             A100, pod="trainer-a-7d9-x1", namespace="ml", container="main"),
             {ENGINE: constant(0.02), **memory(3000)}),
    Scenario("unlabelled", {}, {ENGINE: constant(0.0)}),
)


def openmetrics_lines(scenarios: tuple[Scenario, ...], end: int, span_s: int = SPAN_S
                      ) -> Iterator[str]:
    """OpenMetrics text for `scenarios`: families contiguous, each series in time order."""
    metrics = list(dict.fromkeys(m for s in scenarios for m in s.metrics))
    for metric in metrics:
        yield f"# TYPE {metric} gauge"
        for scenario in scenarios:
            value_of = scenario.metrics.get(metric)
            if value_of is None:
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(scenario.labels.items()))
            series = f"{metric}{{{labels}}}" if labels else metric
            for t in range(end - span_s, end + 1, STEP_S):
                value = value_of(t, end)
                if value is not None:
                    yield f"{series} {'NaN' if math.isnan(value) else repr(value)} {t}"
    yield "# EOF"


def write_blocks(scenarios: tuple[Scenario, ...], end: int, workdir: Path, data: Path,
                 span_s: int = SPAN_S) -> None:
    source = workdir / "dcgm.om.txt"
    with source.open("w", encoding="utf-8") as out:
        for line in openmetrics_lines(scenarios, end, span_s):
            out.write(line + "\n")
    assert PROMTOOL is not None
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source),
                    str(data)], check=True, capture_output=True, timeout=600)
    source.unlink()  # 10,000 GPUs' hour is 1.5 GB of text


# ---------------------------------------------------------------------------- the exporter


def serve_reference_exporter() -> ThreadingHTTPServer:
    """Loopback HTTP server answering `/<file>` with the reference exporter output."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            name = self.path.strip("/")
            if name not in REFERENCE_FILES:
                self.send_error(404)
                return
            body = (REFERENCE_DCGM / name).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# ---------------------------------------------------------------------------- prometheus


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bcrypt_hash(password: str) -> str | None:
    """A bcrypt hash for Prometheus's web config, from libcrypt (None where unavailable)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            return None
    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
    return hashed if hashed and hashed.startswith("$2") else None


@dataclass
class PrometheusServer:
    url: str
    ca_file: str
    basic_auth: str | None
    end: datetime
    process: subprocess.Popen[bytes]
    log: Path
    scrape_jobs: tuple[str, ...] = ()
    context: ssl.SSLContext = field(init=False)

    def __post_init__(self) -> None:
        self.context = ssl.create_default_context(cafile=self.ca_file)

    def options(self, **changes: Any) -> ScanOptions:
        fields: dict[str, Any] = {"prometheus_url": self.url, "prometheus_ca": self.ca_file,
                                  "prometheus_basic_auth": self.basic_auth}
        fields.update(changes)
        return ScanOptions(**fields)

    def cli_args(self) -> list[str]:
        args = ["--prometheus-url", self.url, "--prometheus-ca", self.ca_file]
        return args + (["--prometheus-basic-auth", self.basic_auth] if self.basic_auth else [])

    def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(self.url + path + query)
        if self.basic_auth:
            import base64

            token = base64.b64encode(self.basic_auth.encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10, context=self.context) as response:
            return response.read()

    def query(self, promql: str) -> list[dict[str, Any]]:
        document = orjson.loads(self.get("/api/v1/query", {"query": promql}))
        result: list[dict[str, Any]] = document["data"]["result"]
        return result

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                self.get("/-/ready")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready: {self.log.read_text()[-2000:]}")

    def wait_for_scrapes(self, count: int = 2, timeout: float = 60.0) -> None:
        """Until every reference exporter target was scraped `count` times, successfully."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            scraped = {item["metric"].get("job"): float(item["value"][1])
                       for item in self.query("count_over_time(up[5m]) and up == 1")}
            if all(scraped.get(job, 0) >= count for job in self.scrape_jobs):
                return
            time.sleep(0.5)
        raise RuntimeError("the reference exporter was not scraped in time")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


def start_prometheus(workdir: Path, *, scenarios: tuple[Scenario, ...] = SCENARIOS,
                     end: int | None = None, exporter_port: int | None = None,
                     scrape_interval: str = "1s", span_s: int = SPAN_S) -> PrometheusServer:
    """Backfill `scenarios` up to `end`, then start Prometheus over TLS with basic auth."""
    import trustme

    assert PROMETHEUS is not None
    end = end if end is not None else int(time.time()) // 60 * 60 - 600
    data = workdir / "data"
    data.mkdir(parents=True)
    if scenarios:
        write_blocks(scenarios, end, workdir, data, span_s)
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = (workdir / "ca.pem", workdir / "server.pem",
                                    workdir / "server.key")
    authority.cert_pem.write_to_path(str(ca_file))
    certificate.cert_chain_pems[0].write_to_path(str(cert_file))
    certificate.private_key_pem.write_to_path(str(key_file))
    hashed = bcrypt_hash(PASSWORD)
    web = {"tls_server_config": {"cert_file": str(cert_file), "key_file": str(key_file)}}
    if hashed:
        web["basic_auth_users"] = {USER: hashed}  # type: ignore[dict-item]
    (workdir / "web.yml").write_bytes(orjson.dumps(web))
    jobs = []
    scrape_configs = []
    if exporter_port is not None:
        for name in REFERENCE_FILES:
            job = "dcgm-reference-" + name.split("-")[0]
            jobs.append(job)
            # the target's own pod labels, as kubernetes_sd relabelling adds them: the
            # exporter's pod/namespace/container labels become exported_* where they clash
            scrape_configs.append({
                "job_name": job, "metrics_path": f"/{name}",
                "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"],
                                    "labels": {"pod": "dcgm-exporter-x2x7q",
                                               "namespace": "gpu-operator"}}],
            })
    config = {"global": {"scrape_interval": scrape_interval, "evaluation_interval": "15s"},
              "scrape_configs": scrape_configs}
    (workdir / "prometheus.yml").write_bytes(orjson.dumps(config))
    port = free_port()
    log = workdir / "prometheus.log"
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=30d",
         f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={workdir / 'web.yml'}"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    server = PrometheusServer(
        url=f"https://127.0.0.1:{port}", ca_file=str(ca_file),
        basic_auth=f"{USER}:{PASSWORD}" if hashed else None,
        end=datetime.fromtimestamp(end, UTC), process=process, log=log,
        scrape_jobs=tuple(jobs))
    try:
        server.wait_until_ready()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def dcgm_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    if PROMETHEUS is None or PROMTOOL is None:
        pytest.skip("Debian's prometheus package is not installed (apt-get install prometheus)")
    exporter = serve_reference_exporter()
    server = start_prometheus(tmp_path_factory.mktemp("prometheus"),
                              exporter_port=exporter.server_address[1])
    try:
        yield server
    finally:
        server.stop()
        exporter.shutdown()
        exporter.server_close()
