"""Benchmark the engine alone: N normalized resources against the built-in pack, on one core.

Resources are built with `engine.core.model` before the clock starts (a deterministic mix of
instances, ASGs, node groups, launch templates, training jobs, notebooks, Kubernetes workloads,
volumes and buckets; GPUs from the catalog, tags, telemetry, spot/on-demand, running/stopped/
planned). Only `Engine.evaluate(resources, now)` is timed. The baseline, in the same run, is a
bare Python loop doing what any engine must at least do: for each resource and each policy, read
three fields from a dict. The garbage collector is tuned as the CLI tunes it at start-up
(`engine.pipeline.tune_collector`) and paused around each evaluation as the CLI pauses it
(`engine.pipeline.collector_paused`).

It measures the core as installed and says which: pure Python, or compiled with mypyc
(docs/compiled-core.md; build it first to measure it).

    python bench/bench_engine.py                    # 100,000 resources, 3 repeats
    python bench/bench_engine.py -n 20000 --profile # cProfile the evaluation, top hotspots

Writes only under bench/out/ (engine.json with the figures, engine.prof with --profile).
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import gc
import json
import os
import platform
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.core.catalog import Catalog, builtin_catalog  # noqa: E402
from engine.core.compiled import core_kind  # noqa: E402
from engine.core.conditions import EvalContext  # noqa: E402
from engine.core.enrich import enrich  # noqa: E402
from engine.core.evaluate import Engine, door_of  # noqa: E402
from engine.core.labels import is_exempt  # noqa: E402
from engine.core.model import (  # noqa: E402
    Capacity,
    Category,
    GpuSpec,
    Report,
    Resource,
    State,
    Telemetry,
)
from engine.core.policy import BUILTIN  # noqa: E402
from engine.loading.policies import load_policies  # noqa: E402
from engine.pipeline import collector_paused, tune_collector  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent / "out"
CATALOG_CSV = REPO / "engine" / "data" / "catalog" / "gpu_instances.csv"
TARGET_S = 2.0
CUSTODIAN_REFERENCE = "Cloud Custodian value filter chain: ~30-47k resources/s (issue 2)"
# Tuesday 22:00 UTC: outside the default business hours, so off-hours checks do real work.
NOW = datetime(2026, 11, 24, 22, 0, tzinfo=UTC)

CATEGORY_WEIGHTS = {
    Category.INSTANCE: 30,
    Category.WORKLOAD: 20,
    Category.VOLUME: 14,
    Category.NODE_GROUP: 8,
    Category.AUTOSCALING_GROUP: 6,
    Category.BUCKET: 8,
    Category.LAUNCH_TEMPLATE: 5,
    Category.TRAINING_JOB: 4,
    Category.NOTEBOOK: 3,
    Category.ENDPOINT: 2,
}
PLAIN_TYPES = ("m5.xlarge", "t3.large", "e2-standard-4", "Standard_D4s_v5")
TEAMS = ("ml-research", "inference", "platform", "data")
OFFHOURS = ("off=(M-F,19);on=(M-F,7);tz=pt", "off=[(M-F,21),(U,18)];on=[(M-F,6)];tz=et")
DCGM_METRICS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "nvml.utilization")


class ResourceFactory:
    """Deterministic normalized resources, enriched from the catalog like adapters do."""

    def __init__(self, catalog: Catalog, seed: int) -> None:
        self.catalog = catalog
        self.rng = random.Random(seed)
        self.gpu_types = _catalog_types(catalog)

    def tags(self, number: int) -> dict[str, str]:
        rng = self.rng
        tags = {"Name": f"res-{number}", "owner": f"{rng.choice(TEAMS)}@example.com"}
        roll = rng.random()
        if roll < 0.6:
            tags |= {"team": rng.choice(TEAMS), "project": f"p{rng.randint(1, 40)}",
                     "cost-center": f"cc-{rng.randint(1000, 9999)}"}
        elif roll < 0.8:
            tags["Team"] = rng.choice(TEAMS)
        tags["env"] = rng.choices(("dev", "staging", "prod"), (5, 3, 2))[0]
        if rng.random() < 0.1:
            tags["gpuwarden-offhours"] = rng.choice(OFFHOURS)
        if rng.random() < 0.03:
            tags["gpuwarden.io/exempt"] = "gpu-spot-required,gpu-idle"
        return tags

    def telemetry(self) -> Telemetry | None:
        rng = self.rng
        if rng.random() < 0.3:
            return None
        return Telemetry(average_activity_pct=rng.choice((0.5, 3.0, 22.0, 55.0, 91.0)),
                         metric=rng.choice(DCGM_METRICS), samples=rng.randint(12, 240),
                         window_seconds=3600, peak_memory_gib=rng.choice((4.0, 9.5, 30.0, 70.0)))

    def state(self) -> State:
        return self.rng.choices((State.RUNNING, State.STOPPED, State.PLANNED), (70, 10, 20))[0]

    def resource(self, number: int) -> Resource:
        rng = self.rng
        categories, weights = zip(*CATEGORY_WEIGHTS.items(), strict=True)
        category: Category = rng.choices(categories, weights)[0]
        common: dict[str, Any] = {
            "provider": rng.choice(("aws", "gcp", "azure")), "category": category,
            "id": f"res-{number}", "name": f"res-{number}", "region": "us-east-1",
            "tags": self.tags(number), "state": self.state(),
        }
        if category in (Category.VOLUME, Category.BUCKET):
            encrypted = rng.choices((True, False, None), (7, 2, 1))[0]
            return Resource(kind="aws_ebs_volume" if category is Category.VOLUME else
                            "aws_s3_bucket", encrypted=encrypted,
                            customer_key=rng.random() < 0.3,
                            unknown=frozenset() if encrypted is not None else {"encrypted"},
                            **common)
        if category is Category.WORKLOAD:
            return self.workload(common)
        gpu = rng.random() < 0.7
        instance_type = rng.choice(self.gpu_types if gpu else PLAIN_TYPES)
        resource = Resource(
            kind="aws_instance", instance_type=instance_type,
            count=rng.choice((1, 1, 2, 4)), telemetry=self.telemetry(),
            capacity=rng.choices((Capacity.SPOT, Capacity.ON_DEMAND, Capacity.UNKNOWN),
                                 (35, 55, 10))[0],
            **common,
        )
        return enrich(resource, self.catalog)

    def workload(self, common: dict[str, Any]) -> Resource:
        rng = self.rng
        model, memory = rng.choice((("NVIDIA A100 80GB SXM", 80.0), ("NVIDIA H100 80GB SXM",
                                    80.0), ("NVIDIA T4", 16.0), ("NVIDIA L4", 24.0)))
        declared = rng.choice((None, 6.0, 18.0, 60.0))
        annotations = {"gpuwarden.io/gpu-memory": f"{declared}Gi"} if declared else {}
        common = common | {"provider": "kubernetes", "namespace": rng.choice(("train", "serve")),
                           "cluster": "gpu-1"}
        return Resource(
            kind="Deployment", annotations=annotations,
            namespace_labels={"environment": rng.choice(("dev", "production"))},
            count=rng.choice((1, 2, 8)),
            gpu=GpuSpec(model=model, count=rng.choice((1.0, 2.0)), memory_gib=memory,
                        declared_memory_gib=declared),
            capacity=rng.choice((Capacity.SPOT, Capacity.ON_DEMAND)),
            hourly_usd=self.catalog.gpu_hourly(model), telemetry=self.telemetry(),
            **common,
        )


def _catalog_types(catalog: Catalog) -> list[str]:
    """GPU instance types the catalog knows, from its shipped CSV."""
    with CATALOG_CSV.open(encoding="utf-8") as handle:
        names = [row["instance_type"] for row in csv.DictReader(handle)]
    return [name for name in names if catalog.instance(name) is not None]


def build_resources(count: int, seed: int, catalog: Catalog) -> list[Resource]:
    factory = ResourceFactory(catalog, seed)
    return [factory.resource(number) for number in range(count)]


Timing = tuple[float, float]  # (wall seconds, CPU seconds of this process)


def timed(function: Callable[[], Any], repeat: int) -> tuple[Timing, Any]:
    """Median wall and CPU time of `function()` over `repeat` calls, and its last result.
    CPU time is what to compare when other work shares the machine."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        result = None  # the previous call's report is freed before the clock starts, not in it
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        result = function()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return (statistics.median(walls), statistics.median(cpus)), result


def evaluate_as_the_cli_does(engine: Engine, resources: list[Resource]) -> Report:
    with collector_paused():
        return engine.evaluate(resources, NOW)


def verdicts_only(engine: Engine, resources: list[Resource]) -> int:
    """Diagnostic: the decisions alone (`Engine.verdict` per applicable policy, exemptions
    honoured), without building findings; shows where evaluate's time goes."""
    ctx = EvalContext(now=NOW, catalog=engine.catalog)
    decided = 0
    for resource in resources:
        door = door_of(resource)
        for policy in engine.policies:
            if resource.category not in policy.categories or policy.enforcement(door) == "off":
                continue
            if is_exempt(resource, policy.id):
                continue
            engine.verdict(policy, resource, ctx)
            decided += 1
    return decided


def bare_loop(rows: list[dict[str, Any]], policies: int) -> int:
    """The floor: per resource and policy, three dict reads and a comparison."""
    hits = 0
    for row in rows:
        for _ in range(policies):
            tags = row["tags"]
            if row["capacity"] != "spot" and tags.get("env") != "prod" and row["state"]:
                hits += 1
    return hits


def baseline_rows(resources: list[Resource]) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json", include={"tags", "capacity", "state"}) for r in resources]


def pin_to_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


def profile(engine: Engine, resources: list[Resource], top: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    evaluate_as_the_cli_does(engine, resources)
    profiler.disable()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(OUT_DIR / "engine.prof")
    stats = pstats.Stats(profiler).strip_dirs()
    print(f"\ntop {top} by own time (full profile: bench/out/engine.prof)")
    stats.sort_stats("tottime").print_stats(top)
    print(f"top {top} by cumulative time")
    stats.sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--resources", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one evaluation")
    parser.add_argument("--top", type=int, default=25, help="hotspots to print with --profile")
    args = parser.parse_args()

    pinned = pin_to_one_core()
    tune_collector()
    catalog = builtin_catalog()
    engine = Engine(load_policies([BUILTIN]), catalog)
    build_start = time.perf_counter()
    resources = build_resources(args.resources, args.seed, catalog)
    build_s = time.perf_counter() - build_start

    policies = len(engine.policies)
    (engine_s, engine_cpu), report = timed(lambda: evaluate_as_the_cli_does(engine, resources),
                                                args.repeat)
    (verdicts_s, verdicts_cpu), _ = timed(lambda: verdicts_only(engine, resources), args.repeat)
    rows = baseline_rows(resources)
    (baseline_s, baseline_cpu), _ = timed(lambda: bare_loop(rows, policies), args.repeat)
    n = len(resources)
    # CPU time is the figure judged: wall time counts whatever else shares the machine.
    verdict = "ok" if engine_cpu <= TARGET_S else "OVER"
    summary = report.summary
    core = core_kind()
    print(f"python {platform.python_version()}, core: {core}, {pinned}, median of {args.repeat}; "
          f"{n:,} resources built in {build_s:.1f} s (not timed); {policies} policies")
    print(f"{'case':<34}{'wall s':>8}{'cpu s':>8}{'resources/s':>13}  (per CPU second)")
    print(f"{'engine.evaluate (built-in pack)':<34}{engine_s:>8.2f}{engine_cpu:>8.2f}"
          f"{n / engine_cpu:>13,.0f}   target <= {TARGET_S:.0f} s CPU: {verdict}")
    print(f"{'  of which verdicts only (diag.)':<34}{verdicts_s:>8.2f}{verdicts_cpu:>8.2f}"
          f"{n / verdicts_cpu:>13,.0f}   engine = {engine_cpu / verdicts_cpu:.1f}x the "
          f"verdicts; the rest builds {summary.findings:,} findings")
    print(f"{'bare loop (3 dict reads x policy)':<34}{baseline_s:>8.2f}{baseline_cpu:>8.2f}"
          f"{n / baseline_cpu:>13,.0f}   engine = {engine_cpu / baseline_cpu:.0f}x the bare loop")
    print(f"reference: {CUSTODIAN_REFERENCE}")
    print(f"report: {summary.findings:,} findings ({summary.failed:,} fail, "
          f"{summary.unknown:,} unknown), {summary.passed:,} passes, {summary.exempted:,} exempted")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "engine.json").write_text(json.dumps({
        "resources": n, "policies": policies, "repeat": args.repeat, "core": core,
        "engine_s": engine_s,
        "engine_cpu_s": engine_cpu, "verdicts_s": verdicts_s, "verdicts_cpu_s": verdicts_cpu,
        "baseline_s": baseline_s, "baseline_cpu_s": baseline_cpu, "findings": summary.findings,
        "failed": summary.failed, "unknown": summary.unknown, "passed": summary.passed,
    }, indent=2) + "\n")
    if args.profile:
        profile(engine, resources, args.top)
    if verdict != "ok":
        sys.exit(1)


if __name__ == "__main__":
    main()
