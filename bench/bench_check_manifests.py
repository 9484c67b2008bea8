"""Benchmark `gpuwarden check-manifests` end to end, beside a bare YAML parse of the same files.

The manifests are generated (seeded): `--deployments` Deployments, `--per-file` to a file as
multi-document YAML, shaped like what teams write for GPU serving and training (labels,
annotations, GPU limits and requests, node selectors, tolerations, affinity, probes, volumes,
env). Every case runs as a fresh subprocess, `--repeat` times; the table shows the median wall
and CPU time and the peak RSS of that child (GNU time, as bench_check_plan.py measures it).
The baselines parse the same files and nothing else: `yaml.safe_load_all` with PyYAML's pure
Python loader, and with its C loader (`yaml.CSafeLoader`, libyaml).

    python bench/bench_check_manifests.py                  # 5,000 Deployments, 3 repeats
    python bench/bench_check_manifests.py --deployments 20000 --repeat 5

Writes only under bench/out/ (the manifests and check_manifests.json with the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_check_plan import Row, gpuwarden_command, median_run
from gen_plan import OUT_DIR

TEAMS = ("vision", "nlp", "recsys", "speech", "platform")
GPU_MODELS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", "Tesla-T4",
              "NVIDIA-A10G")
IMAGES = ("nvcr.io/nvidia/tritonserver:24.05-py3", "vllm/vllm-openai:v0.5.0",
          "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", "ghcr.io/example/embedder:1.4.2")


def deployment(rng: random.Random, index: int) -> dict[str, Any]:
    """One Deployment; most ask for GPUs, some pin spot capacity or a GPU model."""
    team = rng.choice(TEAMS)
    name = f"{team}-svc-{index}"
    gpus = rng.choice((0, 1, 1, 1, 2, 4, 8))
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": team}
    if rng.random() < 0.7:
        labels |= {"team": team, "cost-center": f"cc-{rng.randint(1000, 9999)}"}
    pod_spec: dict[str, Any] = {
        "serviceAccountName": f"{team}-runner",
        "containers": [_container(rng, name, gpus)],
        "volumes": [{"name": "model-cache", "emptyDir": {"sizeLimit": "50Gi"}},
                    {"name": "config", "configMap": {"name": f"{name}-config"}}],
    }
    if gpus:
        pod_spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                    "effect": "NoSchedule"}]
        selector = {"nvidia.com/gpu.product": rng.choice(GPU_MODELS)}
        if rng.random() < 0.4:
            selector["karpenter.sh/capacity-type"] = "spot"
        pod_spec["nodeSelector"] = selector
    if rng.random() < 0.3:
        pod_spec["affinity"] = {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
                    "topologyKey": "kubernetes.io/hostname"}}]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": f"{team}-{rng.choice(('dev', 'prod'))}",
                     "labels": labels,
                     "annotations": {"owner": f"{team}@example.com",
                                     "deployment.kubernetes.io/revision": str(rng.randint(1, 40))}},
        "spec": {
            "replicas": rng.choice((1, 1, 2, 3, 4)),
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def _container(rng: random.Random, name: str, gpus: int) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": {"cpu": f"{rng.choice((2, 4, 8))}", "memory": f"{rng.choice((16, 32, 64))}Gi"},
        "limits": {"memory": f"{rng.choice((32, 64, 128))}Gi"},
    }
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = gpus
        resources["requests"]["nvidia.com/gpu"] = gpus
    return {
        "name": "server",
        "image": rng.choice(IMAGES),
        "args": ["--model", f"/models/{name}", "--port", "8000", "--max-batch-size", "32"],
        "ports": [{"name": "http", "containerPort": 8000}, {"name": "metrics",
                                                            "containerPort": 8002}],
        "env": [{"name": "MODEL_NAME", "value": name},
                {"name": "LOG_LEVEL", "value": rng.choice(("info", "debug"))},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf",
                                                                    "key": "token"}}}],
        "resources": resources,
        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"},
                           "initialDelaySeconds": 30, "periodSeconds": 10},
        "volumeMounts": [{"name": "model-cache", "mountPath": "/models"},
                         {"name": "config", "mountPath": "/etc/server", "readOnly": True}],
    }


def write_manifests(directory: Path, deployments: int, per_file: int, seed: int) -> int:
    """The manifests under `directory` (replaced); returns their total size in bytes."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    rng = random.Random(seed)
    size = 0
    for start in range(0, deployments, per_file):
        docs = [deployment(rng, i) for i in range(start, min(start + per_file, deployments))]
        text = yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True)
        path = directory / f"deployments-{start // per_file:04d}.yaml"
        path.write_text(text, encoding="utf-8")
        size += len(text.encode())
    return size


def parse_command(directory: Path, loader: str) -> list[str]:
    code = ("import sys, pathlib, yaml\n"
            f"L = yaml.{loader}\n"
            "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.yaml')):\n"
            "    list(yaml.load_all(p.read_text(encoding='utf-8'), Loader=L))\n")
    return [sys.executable, "-c", code, str(directory)]


def check_command(directory: Path) -> list[str]:
    return [*gpuwarden_command(), "check-manifests", str(directory), "--format", "json",
            "-o", os.devnull]


def measure(directory: Path, repeat: int, deployments: int) -> list[Row]:
    pure = median_run(parse_command(directory, "SafeLoader"), repeat)
    libyaml = median_run(parse_command(directory, "CSafeLoader"), repeat)
    check = median_run(check_command(directory), repeat)
    return [
        Row(f"yaml.safe_load_all (pure Python), {deployments} Deployments", pure.wall_s,
            pure.cpu_s, pure.peak_mib, "-", "-", "-"),
        Row(f"yaml CSafeLoader (libyaml), {deployments} Deployments", libyaml.wall_s,
            libyaml.cpu_s, libyaml.peak_mib, "-", "-", "-"),
        Row(f"check-manifests, {deployments} Deployments", check.wall_s, check.cpu_s,
            check.peak_mib, "-",
            f"{check.cpu_s / libyaml.cpu_s:.1f}x CSafeLoader CPU, "
            f"{check.cpu_s / pure.cpu_s:.2f}x pure-Python CPU", "-"),
    ]


def print_table(rows: list[Row], repeat: int, size: int) -> None:
    header = ("case", "wall s", "cpu s", "peak MiB", "vs baseline")
    table = [header] + [(r.case, f"{r.wall_s:.2f}", f"{r.cpu_s:.2f}", f"{r.peak_mib:.0f}",
                         r.baseline) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    print(f"median of {repeat} runs; python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"PyYAML {yaml.__version__} (libyaml: {yaml.__with_libyaml__}), "
          f"{size / 1e6:.1f} MB of YAML")
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=5000)
    parser.add_argument("--per-file", type=int, default=100)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    directory = OUT_DIR / f"manifests-{args.deployments}"
    size = write_manifests(directory, args.deployments, args.per_file, args.seed)
    rows = measure(directory, args.repeat, args.deployments)
    print_table(rows, args.repeat, size)
    (OUT_DIR / "check_manifests.json").write_text(json.dumps(
        {"rows": [asdict(r) for r in rows], "repeat": args.repeat, "bytes": size}, indent=2)
        + "\n")


if __name__ == "__main__":
    main()
