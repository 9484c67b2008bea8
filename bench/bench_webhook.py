"""Admission webhook load benchmark (not a test: prints figures, asserts nothing).

Starts `gpuwarden webhook` in a subprocess over TLS (trustme certificates, 127.0.0.1 only,
no cluster), then 16 keep-alive httpx clients post a realistic mix of AdmissionReviews at a
paced total rate (default 200 reviews/s for 10 s): reference kubewarden requests (CREATE,
UPDATE, DELETE without GPUs), the kyverno / NVIDIA GPU manifests (denied), crafted GPU
workloads (allowed, warned, patched), split between /validate and /mutate.

Reports reviews/s, client p50/p99, server-side p50/p99 (from the /metrics histogram, warm-up
excluded), evaluation alone p50/p99 (one review judged in-process 5,000 times) and errors.

    python bench/bench_webhook.py [--rate 200] [--duration 10] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import trustme
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.pipeline import build_engine  # noqa: E402
from engine.webhook.admission import AdmissionSettings, Judge, PolicyEvaluator  # noqa: E402
from engine.webhook.caches import ClusterCache  # noqa: E402
from engine.webhook.review import parse_review  # noqa: E402

ADMISSION = REPO / "tests" / "data" / "reference" / "admission"  # see its SOURCES.md
HISTOGRAM = "gpuwarden_admission_request_duration_seconds"
TAGS = {"team": "ml", "project": "llm", "cost-center": "cc-42"}
KINDS = {"Pod": ("", "v1", "pods"), "Deployment": ("apps", "v1", "deployments"),
         "Job": ("batch", "v1", "jobs"), "CronJob": ("batch", "v1", "cronjobs")}


# ---------------------------------------------------------------------------- the review mix


def envelope(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("kind") == "AdmissionReview":
        return request
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def create_review(obj: dict[str, Any]) -> dict[str, Any]:
    group, version, plural = KINDS[obj["kind"]]
    metadata = obj.get("metadata", {})
    return envelope({
        "uid": "", "operation": "CREATE", "dryRun": False,
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": plural},
        "name": metadata.get("name", ""), "namespace": metadata.get("namespace", "default"),
        "userInfo": {"username": "ci-deployer", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": None,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    })


def crafted_deployment(labels: dict[str, str], selector: dict[str, str],
                       annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "ml", "labels": labels,
                     "annotations": annotations},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "trainer"}}, "template": {
            "metadata": {"labels": {"app": "trainer"}},
            "spec": {"nodeSelector": selector, "containers": [{
                "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "32Gi"}}}]}}},
    }


def review_mix() -> list[tuple[str, dict[str, Any]]]:
    """(endpoint, review) pairs, weighted roughly like a busy cluster: most objects carry no
    GPU; GPU ones are denied, warned or patched."""
    mix: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(ADMISSION.glob("kw-*.json")):
        body = envelope(json.loads(path.read_text()))
        mix += [("validate", body)] * 3 + [("mutate", body)]
    for path in sorted(ADMISSION.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if isinstance(obj, dict) and obj.get("kind") in KINDS:
                mix += [("validate", create_review(obj)), ("mutate", create_review(obj))]
    product = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    spot = {"karpenter.sh/capacity-type": "spot"}
    small = {"gpuwarden.io/gpu-memory": "8Gi"}
    for labels, selector, notes in (
        (TAGS, {**spot, **product}, {}),  # compliant
        (TAGS, {**spot, **product}, small),  # warned: MIG slice fits
        (TAGS, product, small),  # mutate: spot + MIG swap
        ({}, {}, {}),  # denied twice
    ):
        body = create_review(crafted_deployment(labels, selector, notes))
        mix += [("validate", body)] * 2 + [("mutate", body)] * 2
    return mix


def with_uid(body: dict[str, Any]) -> bytes:
    request = dict(body["request"], uid=str(uuid.uuid4()))
    return json.dumps({**body, "request": request}).encode()


# ---------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(directory: Path, port: int) -> tuple[subprocess.Popen[bytes], ssl.SSLContext]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())
    process = subprocess.Popen(
        [sys.executable, "-m", "engine", "webhook", "--cert", str(cert), "--key", str(key),
         "--host", "127.0.0.1", "--port", str(port), "--no-cluster", "--log-level", "warning"],
        cwd=REPO,
    )
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return process, context


def wait_ready(url: str, context: ssl.SSLContext, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("the webhook server exited")
        try:
            if httpx.get(f"{url}/readyz", verify=context, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit("the webhook server did not become ready")


def histogram(url: str, context: ssl.SSLContext) -> dict[float, float]:
    """Cumulative bucket counts of the request latency histogram, both endpoints summed."""
    text = httpx.get(f"{url}/metrics", verify=context, timeout=5).text
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{HISTOGRAM}_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """Prometheus' histogram_quantile over the difference of two scrapes (linear within a
    bucket)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return float("nan")
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width)
        lower_bound, lower_count = bound, count
    return bounds[-2]


# ---------------------------------------------------------------------------- load


async def client_loop(url: str, context: ssl.SSLContext, mix: list[tuple[str, dict[str, Any]]],
                      interval: float, stop_at: float, offset: float, seed: int,
                      latencies: list[float], errors: list[str]) -> None:
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=url, verify=context, limits=limits,
                                 timeout=5) as client:
        next_at = time.perf_counter() + offset
        while next_at < stop_at:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            endpoint, body = rng.choice(mix)
            payload = with_uid(body)
            started = time.perf_counter()
            try:
                reply = await client.post(f"/{endpoint}", content=payload,
                                          headers={"content-type": "application/json"})
                elapsed = time.perf_counter() - started
                uid = json.loads(payload)["request"]["uid"]
                if reply.status_code != 200 or reply.json()["response"]["uid"] != uid:
                    errors.append(f"HTTP {reply.status_code}")
                else:
                    latencies.append(elapsed)
            except httpx.HTTPError as exc:
                errors.append(type(exc).__name__)
            next_at += interval


async def run_load(url: str, context: ssl.SSLContext, mix: list[tuple[str, dict[str, Any]]],
                   rate: float, duration: float, clients: int) -> tuple[list[float], list[str],
                                                                        float]:
    latencies: list[float] = []
    errors: list[str] = []
    interval = clients / rate
    started = time.perf_counter()
    stop_at = started + duration
    await asyncio.gather(*(
        client_loop(url, context, mix, interval, stop_at, interval * i / clients, i,
                    latencies, errors)
        for i in range(clients)
    ))
    return latencies, errors, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------------------- evaluation alone


def evaluation_alone(times: int) -> tuple[list[float], list[float]]:
    """Judge one GPU review in-process (normalize + all admission policies), `times` times:
    (wall-clock seconds, CPU seconds of this thread) per judgement. CPU time leaves out the
    moments the machine ran something else, which wall-clock percentiles include."""
    engine = build_engine(None)
    judge = Judge(PolicyEvaluator(engine), ClusterCache(None), AdmissionSettings(),
                  help_by_policy={p.id: p.spec.help for p in engine.policies},
                  catalog=engine.catalog)
    body = create_review(crafted_deployment(
        TAGS, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        {"gpuwarden.io/gpu-memory": "8Gi"}))
    request = parse_review(with_uid(body))
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    for _ in range(200):
        judge.validate(request, now)
    wall, cpu = [], []
    for _ in range(times):
        started, started_cpu = time.perf_counter(), time.thread_time()
        judge.validate(request, now)
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="reviews per second, total")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--evaluations", type=int, default=5000)
    args = parser.parse_args()

    eval_wall, eval_cpu = evaluation_alone(args.evaluations)
    mix = review_mix()
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as scratch:
        process, context = start_server(Path(scratch), port)
        try:
            wait_ready(url, context, process)
            asyncio.run(run_load(url, context, mix, args.rate, 1.0, args.clients))  # warm-up
            before = histogram(url, context)
            latencies, errors, elapsed = asyncio.run(
                run_load(url, context, mix, args.rate, args.duration, args.clients))
            after = histogram(url, context)
        finally:
            process.terminate()
            process.wait(timeout=10)

    ms = 1000.0
    answered = len(latencies)
    print(f"review mix: {len(mix)} weighted bodies; {args.clients} TLS keep-alive clients, "
          f"target {args.rate:.0f} reviews/s for {args.duration:.0f} s")
    print(f"throughput       {answered / elapsed:8.1f} reviews/s ({answered} answered)")
    print(f"client latency   p50 {percentile(latencies, 0.5) * ms:6.2f} ms   "
          f"p99 {percentile(latencies, 0.99) * ms:6.2f} ms   "
          f"mean {statistics.fmean(latencies) * ms if latencies else float('nan'):6.2f} ms")
    print(f"server handler   p50 {histogram_quantile(0.5, before, after) * ms:6.2f} ms   "
          f"p99 {histogram_quantile(0.99, before, after) * ms:6.2f} ms   (/metrics histogram)")
    print(f"evaluation alone p50 {percentile(eval_wall, 0.5) * ms:6.2f} ms   "
          f"p99 {percentile(eval_wall, 0.99) * ms:6.2f} ms   wall clock; CPU time "
          f"p50 {percentile(eval_cpu, 0.5) * ms:.2f} ms, p99 {percentile(eval_cpu, 0.99) * ms:.2f}"
          f" ms ({args.evaluations} in-process judgements of one GPU Deployment)")
    print(f"errors           {len(errors)}" + (f" ({', '.join(sorted(set(errors)))})"
                                              if errors else ""))


if __name__ == "__main__":
    main()
