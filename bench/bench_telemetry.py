"""Benchmark GPU telemetry: 10,000 GPUs' DCGM series over a 1-hour window in a real Prometheus,
from the first query to resources with telemetry attached.

The series (GR_ENGINE_ACTIVE, FB_USED, FB_FREE, PIPE_TENSOR_ACTIVE every 30 s, idle to busy)
are generated as OpenMetrics text, loaded with `promtool tsdb create-blocks-from openmetrics`
and served by Debian's `prometheus` over TLS with basic auth (tests/prometheus_fixture.py).
The estate they join: 2,000 Deployments × 5 replicas (one GPU per pod, pods linked by
ownerReferences through their ReplicaSets), on 1,250 Kubernetes nodes whose providerIDs name
1,250 scanned EC2 instances, so every reading joins a workload and an instance.

Timed, `--repeat` times (median reported): `fetch_gpu_series` (the six batched queries, run
concurrently, and folding their answers into readings) and `join_readings`. Beside it, the same
six queries sent raw with `stats=all`: Prometheus's own evaluation time (`execTotalTime`, the
slowest query) and the wall time to receive the answers unparsed. Memory: the peak of Python
allocations during fetch + join (tracemalloc), this process's peak RSS, Prometheus's peak RSS.

    python bench/bench_telemetry.py                 # 10,000 GPUs, 3 repeats
    python bench/bench_telemetry.py --gpus 2000     # a smaller estate

Writes only under bench/out/ (telemetry.json with the figures; the Prometheus data directory
while it runs).
Exits 1 when fetch + join takes longer than the target.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import time
import tracemalloc
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.core.catalog import builtin_catalog  # noqa: E402
from engine.core.model import Category, Resource, State  # noqa: E402
from engine.sources.kubernetes import workload_resource  # noqa: E402
from engine.telemetry.join import join_readings  # noqa: E402
from engine.telemetry.prometheus import (  # noqa: E402
    METRIC_STATS,
    PrometheusSettings,
    fetch_gpu_series,
    metric_query,
)
from tests.prometheus_fixture import (  # noqa: E402
    ENGINE,
    FB_FREE,
    FB_USED,
    TENSOR,
    PrometheusServer,
    Scenario,
    constant,
    start_prometheus,
    wobble,
)

OUT_DIR = Path(__file__).resolve().parent / "out"
TARGET_S = 5.0
GPUS_PER_NODE = 8
REPLICAS = 5
WINDOW_S = 3600


def scenarios(gpus: int) -> tuple[Scenario, ...]:
    found = []
    for index in range(gpus):
        node, slot = divmod(index, GPUS_PER_NODE)
        deployment, replica = divmod(index, REPLICAS)
        activity = (index % 10) / 10.0  # a tenth of the GPUs idle, the rest 10% .. 90%
        labels = {"gpu": str(slot), "UUID": f"GPU-{index:08d}-0000-4000-8000-000000000000",
                  "device": f"nvidia{slot}", "modelName": "NVIDIA H100 80GB HBM3",
                  "Hostname": f"ip-10-{node // 250}-{node % 250}-10.ec2.internal",
                  "pod": f"train-{deployment}-5d8f7b9c4-{replica:05d}"[:63],
                  "namespace": f"team-{deployment % 20}", "container": "main",
                  "instance": f"10.{node // 250}.{node % 250}.10:9400", "job": "dcgm-exporter"}
        found.append(Scenario(f"gpu-{index}", labels, {
            ENGINE: wobble(activity, 0.02), TENSOR: constant(activity * 0.6),
            FB_USED: constant(40000.0 + index % 30000), FB_FREE: constant(41559.0 - index % 30000),
        }))
    return tuple(found)


def estate(gpus: int) -> tuple[list[Resource], list[dict[str, Any]], list[dict[str, Any]]]:
    """(workload and instance resources, Node objects, Pod owner objects)."""
    catalog = builtin_catalog()
    resources: list[Resource] = []
    owners: list[dict[str, Any]] = []
    for deployment in range(gpus // REPLICAS):
        name, namespace = f"train-{deployment}", f"team-{deployment % 20}"
        obj = {"kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
               "spec": {"replicas": REPLICAS, "template": {"spec": {"nodeSelector": {
                   "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "containers": [{
                       "name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
        found = workload_resource(obj, catalog=catalog)
        assert found is not None
        resources.append(found)
        for replica in range(REPLICAS):
            owners.append({"kind": "Pod", "metadata": {
                "name": f"{name}-5d8f7b9c4-{replica:05d}", "namespace": namespace,
                "labels": {"pod-template-hash": "5d8f7b9c4"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-5d8f7b9c4",
                                     "controller": True}]}})
    nodes = []
    for node in range(-(-gpus // GPUS_PER_NODE)):
        instance_id = f"i-{node:017x}"
        nodes.append({"kind": "Node", "metadata": {
            "name": f"ip-10-{node // 250}-{node % 250}-10.ec2.internal"},
            "spec": {"providerID": f"aws:///us-east-1a/{instance_id}"}})
        resources.append(Resource(provider="aws", kind="aws_instance",
                                  category=Category.INSTANCE, id=instance_id, name=instance_id,
                                  instance_type="p5.48xlarge", state=State.RUNNING))
    return resources, nodes, owners


def raw_queries(server: PrometheusServer, settings: PrometheusSettings) -> tuple[float, float]:
    """(slowest execTotalTime Prometheus reports, wall time to receive all six answers)."""
    import base64
    import ssl

    context = ssl.create_default_context(cafile=server.ca_file)
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if settings.basic_auth:
        headers["Authorization"] = "Basic " + base64.b64encode(
            settings.basic_auth.encode()).decode()

    def run(metric: str) -> float:
        body = urllib.parse.urlencode({
            "query": metric_query(metric, METRIC_STATS[metric], WINDOW_S),
            "time": f"{server.end.timestamp():.3f}", "stats": "all"}).encode()
        request = urllib.request.Request(server.url + "/api/v1/query", data=body,
                                         headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=120, context=context) as response:
            document = json.loads(response.read())
        timings = (document.get("data", {}).get("stats") or {}).get("timings") or {}
        return float(timings.get("execTotalTime", "nan"))

    started = time.perf_counter()
    with ThreadPoolExecutor(len(METRIC_STATS)) as pool:
        exec_times = list(pool.map(run, METRIC_STATS))
    return max(exec_times), time.perf_counter() - started


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        print("needs Debian's prometheus package (apt-get install prometheus)")
        return 2
    OUT_DIR.mkdir(exist_ok=True)
    workdir = OUT_DIR / "telemetry-prometheus"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    started = time.perf_counter()
    server = start_prometheus(workdir, scenarios=scenarios(args.gpus), span_s=WINDOW_S + 300)
    load_s = time.perf_counter() - started
    try:
        options = server.options(telemetry_timeout_s=120.0)
        assert options.prometheus_url is not None
        settings = PrometheusSettings(options.prometheus_url, None, options.prometheus_basic_auth,
                                      options.prometheus_ca, 120.0)
        resources, nodes, owners = estate(args.gpus)
        catalog = builtin_catalog()
        fetch_runs, join_runs, prometheus_runs, transfer_runs = [], [], [], []
        for _ in range(args.repeat):
            exec_s, transfer_s = raw_queries(server, settings)
            prometheus_runs.append(exec_s)
            transfer_runs.append(transfer_s)
            t0 = time.perf_counter()
            fetched = fetch_gpu_series(settings, WINDOW_S, server.end)
            t1 = time.perf_counter()
            joined = join_readings(resources, fetched.readings, catalog=catalog,
                                   objects=nodes, owners=owners)
            t2 = time.perf_counter()
            fetch_runs.append(t1 - t0)
            join_runs.append(t2 - t1)
            assert fetched.failure is None, fetched.failure
            assert len(fetched.readings) == args.gpus, len(fetched.readings)
            assert not joined.unowned
            assert all(r.telemetry is not None for r in joined.resources)
        # memory in a run of its own: tracemalloc slows allocation-heavy code down
        tracemalloc.start()
        fetched = fetch_gpu_series(settings, WINDOW_S, server.end)
        join_readings(resources, fetched.readings, catalog=catalog, objects=nodes,
                      owners=owners)
        peak_python = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        total = [f + j for f, j in zip(fetch_runs, join_runs, strict=True)]
        figures = {
            "gpus": args.gpus, "window_s": WINDOW_S, "samples_per_series": WINDOW_S // 30 + 1,
            "load_s": round(load_s, 2),
            "fetch_and_join_s": round(statistics.median(total), 3),
            "fetch_s": round(statistics.median(fetch_runs), 3),
            "join_s": round(statistics.median(join_runs), 3),
            "prometheus_exec_s": round(statistics.median(prometheus_runs), 3),
            "prometheus_transfer_s": round(statistics.median(transfer_runs), 3),
            "python_peak_alloc_mib": round(peak_python / 2**20, 1),
            "process_peak_rss_mib": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "prometheus_peak_rss_mib": peak_rss_mib(server.process.pid),
            "target_s": TARGET_S,
        }
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # the TSDB: ~100 MB for 10,000 GPUs
    (OUT_DIR / "telemetry.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"{args.gpus:,} GPUs, {WINDOW_S // 60} min window, series loaded in "
          f"{figures['load_s']} s")
    rows = [
        ("query → joined resources (median)", f"{figures['fetch_and_join_s']} s"),
        ("  six batched queries + folding", f"{figures['fetch_s']} s"),
        ("  join to workloads and instances", f"{figures['join_s']} s"),
        ("Prometheus evaluation (slowest query)", f"{figures['prometheus_exec_s']} s"),
        ("Prometheus answers received, unparsed", f"{figures['prometheus_transfer_s']} s"),
        ("Python allocations, peak", f"{figures['python_peak_alloc_mib']} MiB"),
        ("this process, peak RSS", f"{figures['process_peak_rss_mib']} MiB"),
        ("Prometheus, peak RSS", f"{figures['prometheus_peak_rss_mib']} MiB"),
    ]
    for label, value in rows:
        print(f"  {label:<40} {value}")
    ok = figures["fetch_and_join_s"] <= TARGET_S
    print(f"target ≤ {TARGET_S} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
